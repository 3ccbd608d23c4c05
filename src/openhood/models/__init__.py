"""Models: the registry (``NAME=PATH``), tasks, pre/postprocessors and the served-model unit.

A served model is ``preprocessor → backend → postprocessor`` with a task (``ServedModel``);
``load_models(specs, options)`` builds them by task (``TASK_LOADERS``). The server and the
scheduler use only this package's plain types — never an architecture.
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
from openhood.models.served import OutputSpec, Prepared, ServedModel

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
    "ServedModel",
    "default_model_dir",
    "load_model",
    "load_models",
    "model_name_for",
    "parse_model_spec",
    "read_model_file",
    "resolve_model_dir",
]
