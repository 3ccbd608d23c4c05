"""Models: the registry (``NAME=PATH``), tasks, pre/postprocessors and the served-model unit.

Everything a server serves implements one protocol, ``Served`` (name, ``Task``, readiness probe,
``/v1/models`` entry); a single-pass task's model is ``preprocessor → backend → postprocessor``
(``ServedModel``), a ``generate`` model a decoder with its tokenizer and sampler
(``models.generation.ServedGenerator``). ``load_models(specs, options)`` builds them by task
(``TASK_LOADERS``). The server and the scheduler use only this package's plain types — never an
architecture.
"""

from openhood.models.loading import TASK_LOADERS, load_model, load_models
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
from openhood.models.served import OutputSpec, Prepared, Served, ServedModel
from openhood.models.tasks import Task

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
