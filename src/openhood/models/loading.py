"""Load models by task: a ``ModelSpec`` (name, folder, task) + engine options → a ``Served`` model.

``TASK_LOADERS`` maps each task to the function that builds its served model from a resolved
folder; a new task (``classify``, ``image-classify``, …) adds one entry and its own module
(see docs/architecture.md, "How to add a task"). Each load is measured: the process's resident
memory before and after (``memory_bytes``), so start-up can say what each model costs. The
trade-off: RSS deltas include allocator slack and are only meaningful loaded one at a time,
which is how ``load_models`` loads them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import psutil

from openhood.models.options import EngineOptions
from openhood.models.registry import (
    DEFAULT_TASK,
    ModelNotFoundError,
    ModelSpec,
    ModelSpecError,
    check_unique_names,
    model_name_for,
    resolve_model_dir,
)
from openhood.models.served import Served, ServedModel
from openhood.models.tasks import Task


def _embed_loader(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.models.embed import load_text_embedder

    return load_text_embedder(name, folder, options)


def _image_classify_loader(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.models.image_classify import load_image_classifier

    return load_image_classifier(name, folder, options)


def _generate_loader(name: str, path: Path, options: EngineOptions) -> Served:
    from openhood.models.generation import load_generator

    return load_generator(name, path, options)


def _classify_loader(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.models.classify import load_classifier

    return load_classifier(name, folder, options)


TASK_LOADERS: dict[Task, Callable[[str, Path, EngineOptions], Served]] = {
    Task.EMBED: _embed_loader,
    Task.IMAGE_CLASSIFY: _image_classify_loader,
    Task.GENERATE: _generate_loader,
    Task.CLASSIFY: _classify_loader,
}
GGUF_SUFFIX = ".gguf"  # a decoder LLM file: served as `generate` whatever the spec's task says


def resolve_gguf(spec: ModelSpec) -> Path | None:
    """The GGUF file of a ``generate`` spec (``None`` path = the bundled SmolLM2), else ``None``."""
    if spec.path is not None and spec.path.lower().endswith(GGUF_SUFFIX):
        path = Path(spec.path).expanduser().resolve()
        if not path.is_file():
            raise ModelNotFoundError(f"model file {path} does not exist (expected a .gguf decoder)")
        return path
    if spec.task == Task.GENERATE:
        if spec.path is not None:
            raise ModelSpecError(f"model {spec.name!r}: the generate task serves a .gguf file, got {spec.path!r}")
        from openhood.generate.bundled import default_gguf_path

        return default_gguf_path()
    return None


def task_for(spec: ModelSpec, folder: Path) -> Task:
    """The spec's task; a folder that is an image classifier (``openhood convert``) served with the
    default task is served as ``image-classify``, one from ``openhood train`` as ``classify``, so
    ``--model effnet=DIR`` or ``--model digits=DIR`` needs no TOML file."""
    from openhood.engine.models.efficientnet import is_efficientnet_folder
    from openhood.train.checkpoint import is_mlp_folder

    if spec.task == DEFAULT_TASK and is_efficientnet_folder(folder):
        return Task.IMAGE_CLASSIFY
    if spec.task == DEFAULT_TASK and is_mlp_folder(folder):
        return Task.CLASSIFY
    return spec.task


def load_model(spec: ModelSpec, options: EngineOptions) -> Served:
    """One spec → a served model; its own backend/precision override ``options``."""
    gguf = resolve_gguf(spec)
    folder = gguf if gguf is not None else resolve_model_dir(spec.path)
    task = Task.GENERATE if gguf is not None else task_for(spec, folder)
    loader = TASK_LOADERS.get(task)
    if loader is None:
        raise ModelSpecError(f"model {spec.name!r}: unknown task {task!r}; tasks served: {sorted(TASK_LOADERS)}")
    name = spec.name or (folder.stem if gguf is not None else model_name_for(folder))
    options = replace(options, backend=spec.backend or options.backend, precision=spec.precision or options.precision)
    from openhood.engine.quant import PRECISIONS  # here: importing the server must not import the engine

    if options.precision not in PRECISIONS:
        raise ModelSpecError(
            f"model {name!r}: unknown precision {options.precision!r}; choose one of {', '.join(PRECISIONS)}"
        )
    process = psutil.Process()
    before = process.memory_info().rss
    model = loader(name, folder, options)
    model.memory_bytes = max(0, process.memory_info().rss - before)
    model.buckets = spec.buckets
    return model


def load_models(specs: Sequence[ModelSpec], options: EngineOptions) -> list[Served]:
    """Every spec, in order (the first is the default model of its task); names must be unique."""
    models: list[Served] = []
    try:
        for spec in specs:
            models.append(load_model(spec, options))
        check_unique_names([m.name for m in models])
    except BaseException:
        for m in models:
            m.close()
        raise
    return models
