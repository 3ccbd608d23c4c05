"""Backends: the engines behind the ``Backend`` protocol, chosen by name.

``load_backend("numpy" | "onnxruntime", build_graph, precision="fp32")`` builds one from a
function returning the engine ``Graph`` the model loader made (``openhood.models``; a function
so ONNX Runtime can rebuild its session in ``replicate`` without the backend keeping a second
copy of the weights alive): ``prepare_graph`` applies the fusion
passes, then the precision (``openhood.engine.quant.apply_precision``: fp16 / int8 swap
``Linear`` layers by name). ONNX Runtime can also run a foreign ``.onnx`` file as it is
(``OnnxRuntimeBackend.from_file``: the parity anchor of imported models). The trade-off: heavy
imports (onnxruntime) happen only when that backend is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from openhood.backends.base import Backend, Resumable, check_feeds, resumable_start

if TYPE_CHECKING:
    from openhood.engine.graph.graph import Graph

BACKENDS = ("numpy", "onnxruntime")
BASE_PRECISION = "fp32"


def prepare_graph(graph, *, fusion: bool = True, precision: str = BASE_PRECISION, model_dir: Path | None = None):
    """The unfused graph → fused (unless ``fusion=False``) at ``precision`` (int8 reads its plan
    from ``model_dir``)."""
    from openhood.engine.graph.fusion import fuse
    from openhood.engine.quant import apply_precision

    graph = fuse(graph) if fusion else graph
    if precision == BASE_PRECISION:
        return graph
    return apply_precision(graph, precision, model_dir)


def load_backend(
    name: str, build_graph: Callable[[], Graph], *, precision: str = BASE_PRECISION, threads: int | None = None
) -> Backend:
    """A backend by name over ``build_graph()``, a prepared graph (``prepare_graph``).
    ``threads``: intra-op threads."""
    if name == "numpy":
        from openhood.backends.numpy_backend import NumpyBackend

        return NumpyBackend(build_graph(), precision=precision, threads=threads)
    if name in ("onnxruntime", "ort"):
        from openhood.backends.onnxruntime_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend.from_graph(build_graph, precision=precision, threads=threads)
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS",
    "BASE_PRECISION",
    "Backend",
    "Resumable",
    "check_feeds",
    "load_backend",
    "prepare_graph",
    "resumable_start",
]
