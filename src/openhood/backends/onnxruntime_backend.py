"""The ONNX Runtime backend: a graph run by ONNX Runtime, the speed and parity anchor.

Two sources: OUR graph (``from_graph``: fused, precision applied, exported in memory with
``openhood.export.onnx_export`` and handed to ORT as bytes — nothing written to disk, no cache
to invalidate; the price is the export time at every load, ~1 s for MiniLM), or a foreign
``.onnx`` file as it is (``from_file``: e.g. the imported paraphrase-MiniLM, the reference our
engine is checked against). Sessions come from
``ort_session.make_session``, the one place ORT sessions are configured (``threads`` intra-op
threads, default the cores available; all graph optimizations: on our graph ORT fuses bias +
erf-GELU into ``BiasGelu``; attention and Add + LayerNormalization stay as exported).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from openhood.backends.base import check_feeds
from openhood.backends.ort_session import make_session, run_options
from openhood.engine.kernels.cores import available_cores

if TYPE_CHECKING:
    from openhood.engine.graph.graph import Graph

# Inputs ORT wants as int64 whatever integer type the caller built (token ids, masks).
_INT_INPUT_TYPES = ("tensor(int64)",)


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, source: Callable[[], bytes | str], precision: str = "fp32", threads: int | None = None):
        """``source()`` gives the ONNX model (bytes or a path); called again by ``replicate`` so a
        backend never keeps a second copy of the weights only to be able to replicate."""
        self._source = source
        self.precision = precision
        self.threads = threads or available_cores()
        self.session = make_session(source(), self.threads)
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())
        self._int64 = {i.name for i in self.session.get_inputs() if i.type in _INT_INPUT_TYPES}

    @classmethod
    def from_graph(
        cls, build_graph: Callable[[], Graph], precision: str = "fp32", threads: int | None = None
    ) -> OnnxRuntimeBackend:
        """``build_graph()`` → a prepared engine graph, exported in memory at every (re)build."""
        from openhood.export.onnx_export import graph_to_onnx

        return cls(lambda: graph_to_onnx(build_graph()).SerializeToString(), precision, threads)

    @classmethod
    def from_file(cls, path: str | Path, threads: int | None = None) -> OnnxRuntimeBackend:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX file at {path}")
        return cls(lambda: str(path), "fp32", threads)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(feeds, self.input_names)
        arrays = {
            n: np.asarray(feeds[n]).astype(np.int64, copy=False) if n in self._int64 else np.asarray(feeds[n])
            for n in self.input_names
        }
        return dict(
            zip(self.output_names, self.session.run(list(self.output_names), arrays, run_options()), strict=True)
        )

    def replicate(self, threads: int | None = None) -> OnnxRuntimeBackend:
        """A new session built from the same source: a session owns its weights."""
        return OnnxRuntimeBackend(self._source, self.precision, threads or self.threads)

    def close(self) -> None:
        self.session = None

    def __repr__(self) -> str:
        return f"OnnxRuntimeBackend({self.precision}, outputs={self.output_names}, threads={self.threads})"
