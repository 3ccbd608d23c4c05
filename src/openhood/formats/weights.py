"""Model weights on disk: ``model.safetensors`` only, read as NumPy arrays; pickle refused.

Formats that deserialize with pickle execute arbitrary code on load and break across library
versions, so a folder that only offers them gets a clear refusal naming the files instead of
"just loading". The trade-off: a folder must be converted (``openhood import-onnx``, or the
``safetensors`` package) before openhood runs it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Suffixes of weight files that deserialize with pickle.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
WEIGHTS_NAME = "model.safetensors"


class UnsafeModelFormatError(ValueError):
    """The folder only offers pickle-based weights."""


def weights_file(folder: Path) -> Path:
    """The folder's ``model.safetensors``; a clear refusal when only pickle weights exist."""
    candidate = folder / WEIGHTS_NAME
    if candidate.is_file():
        return candidate
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise UnsafeModelFormatError(
            f"{folder} only has pickle-based weights ({', '.join(pickled)}); openhood never unpickles "
            "model files. Convert them to model.safetensors (e.g. with the `safetensors` package) first."
        )
    raise FileNotFoundError(f"{folder} has no {WEIGHTS_NAME}")


def read_tensors(folder: Path, strip_prefix: str = "") -> dict[str, np.ndarray]:
    """Every tensor of the folder's ``model.safetensors``, ``strip_prefix`` removed from names."""
    from safetensors import safe_open

    tensors: dict[str, np.ndarray] = {}
    with safe_open(str(weights_file(folder)), framework="np") as f:
        for key in f.keys():  # noqa: SIM118 -- safe_open has keys() but is not iterable
            name = key[len(strip_prefix) :] if strip_prefix and key.startswith(strip_prefix) else key
            tensors[name] = f.get_tensor(key)
    return tensors
