"""Backends: the engines behind the ``Backend`` protocol, chosen by name.

``load_backend("numpy" | "onnxruntime", model_dir, precision="fp32")`` is the one entry point
the ``Embedder`` and the server use. Precision is applied to the engine's op graph *after*
fusion, by swapping ``Linear`` layers by name; anything but fp32 is delegated to
``openhood.engine.quant.apply_precision(graph, precision, model_dir)`` when that package
provides it, and refused with a ``ValueError`` otherwise. The trade-off: heavy imports
(onnxruntime) happen only when that backend is asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from openhood.backends.base import Backend

BACKENDS = ("numpy", "onnxruntime")
BASE_PRECISION = "fp32"


def apply_precision(graph, precision: str, model_dir: Path):
    """fp32 → the graph unchanged; other precisions → openhood.engine.quant, or ValueError."""
    if precision == BASE_PRECISION:
        return graph
    try:
        quant = importlib.import_module("openhood.engine.quant")
    except ModuleNotFoundError as exc:
        if exc.name not in ("openhood.engine.quant",):
            raise
        quant = None
    hook = getattr(quant, "apply_precision", None)
    if hook is None:
        raise ValueError(f"precision {precision!r} is not supported yet (supported: {BASE_PRECISION!r})")
    return hook(graph, precision, model_dir)


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
