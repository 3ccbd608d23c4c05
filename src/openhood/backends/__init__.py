"""Backends: the engines behind the ``Backend`` protocol, chosen by name.

``load_backend("numpy" | "onnxruntime", model_dir, precision="fp32")`` is the one entry point
the ``Embedder`` and the server use. Precision is applied to the engine's op graph *after*
fusion, by swapping ``Linear`` layers by name: ``openhood.engine.quant.apply_precision(graph,
precision, model_dir)``, re-exported here; an unknown precision is a ``ValueError``. The
trade-off: heavy imports (onnxruntime) happen only when that backend is asked for.
"""

from __future__ import annotations

from pathlib import Path

from openhood.backends.base import Backend
from openhood.engine.quant import apply_precision

BACKENDS = ("numpy", "onnxruntime")
BASE_PRECISION = "fp32"


def load_backend(name: str = "numpy", model_dir: str | Path | None = None, precision: str = BASE_PRECISION, **options) -> Backend:
    """Build a backend by name. ``options``: ``fusion`` (numpy, default True), ``threads``."""
    if name == "numpy":
        from openhood.backends.numpy_backend import NumpyBackend

        return NumpyBackend(model_dir, precision=precision, **options)
    if name in ("onnxruntime", "ort"):
        from openhood.backends.onnxruntime_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend(model_dir, precision=precision, **options)
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")


__all__ = ["BACKENDS", "Backend", "apply_precision", "load_backend"]
