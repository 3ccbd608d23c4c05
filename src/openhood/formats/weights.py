"""Model weights on disk: ``model.safetensors`` only, read as NumPy arrays; pickle refused.

Formats that deserialize with pickle execute arbitrary code on load and break across library
versions, so a folder that only offers them gets a clear refusal naming the files instead of
"just loading". The trade-off: a folder must be converted (``openhood import-onnx``, or the
``safetensors`` package) before openhood runs it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openhood.formats.errors import ModelFileError

# Suffixes of weight files that deserialize with pickle.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
WEIGHTS_NAME = "model.safetensors"


class UnsafeModelFormatError(ModelFileError):
    """The folder only offers pickle-based weights."""


def weights_file(folder: Path) -> Path:
    """The folder's ``model.safetensors``; a clear refusal when only pickle weights exist or none do."""
    candidate = folder / WEIGHTS_NAME
    if candidate.is_file():
        return candidate
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise UnsafeModelFormatError(
            f"{folder} only has pickle-based weights ({', '.join(pickled)}); openhood never unpickles "
            "model files. Convert them to model.safetensors (e.g. with the `safetensors` package) first."
        )
    raise ModelFileError(f"{folder} has no {WEIGHTS_NAME}")


def load_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file; ``ModelFileError`` naming the file when it is damaged
    (truncated, a header that is not JSON, a tensor past the end) or not a safetensors file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 -- safe_open is not iterable
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelFileError(f"{path}: not a readable safetensors file ({exc})") from None


def read_tensors(folder: Path, strip_prefix: str = "") -> dict[str, np.ndarray]:
    """Every tensor of the folder's ``model.safetensors``, ``strip_prefix`` removed from names."""
    tensors = load_safetensors(weights_file(folder))
    return {k[len(strip_prefix) :] if strip_prefix and k.startswith(strip_prefix) else k: v for k, v in tensors.items()}
