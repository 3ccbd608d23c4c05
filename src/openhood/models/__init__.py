"""Models: the registry (``NAME=PATH``), tasks, pre/postprocessors and the served-model unit.

Everything a server serves implements one protocol, ``Served`` (name, ``Task``, readiness probe,
``/v1/models`` entry); a single-pass task's model is ``preprocessor → backend → postprocessor``
(``ServedModel``), a ``generate`` model a decoder with its tokenizer and sampler
(``models.generation.ServedGenerator``). ``load_models(specs, options)`` builds them by task
(``TASK_LOADERS``). The server and the scheduler use only this package's plain types — never an
architecture.

The loaders and the served-model types (NumPy, psutil, the backends) load lazily
(``__getattr__``): ``openhood serve``'s parser reads ``EngineOptions`` for a default, and
importing a submodule runs this file first, so eager imports here would make every ``openhood``
command pay for the loading machinery while building its parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openhood.lazy import lazy_attributes
from openhood.models.options import EngineOptions
from openhood.models.registry import (
    DEFAULT_MODEL_NAME,
    DEFAULT_TASK,
    ModelNotFoundError,
    ModelSpec,
    ModelSpecError,
    default_model_dir,
    model_name_for,
    parse_model_spec,
    read_model_file,
    resolve_model_dir,
)
from openhood.models.tasks import Task

if TYPE_CHECKING:
    from openhood.models.loading import TASK_LOADERS, load_model, load_models
    from openhood.models.served import OutputSpec, Prepared, Served, ServedModel

# name → the submodule defining it, imported on first use
_LAZY = {
    "TASK_LOADERS": "loading",
    "load_model": "loading",
    "load_models": "loading",
    "OutputSpec": "served",
    "Prepared": "served",
    "Served": "served",
    "ServedModel": "served",
}

__all__ = [
    "DEFAULT_MODEL_NAME",
    "DEFAULT_TASK",
    "TASK_LOADERS",
    "EngineOptions",
    "ModelNotFoundError",
    "ModelSpec",
    "ModelSpecError",
    "OutputSpec",
    "Prepared",
    "Served",
    "ServedModel",
    "Task",
    "default_model_dir",
    "load_model",
    "load_models",
    "model_name_for",
    "parse_model_spec",
    "read_model_file",
    "resolve_model_dir",
]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
