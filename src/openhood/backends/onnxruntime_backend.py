"""The ONNX Runtime backend: OUR exported graph run by ONNX Runtime, the speed anchor.

At load the engine's graph (fused, precision applied) is exported in memory with
``openhood.export.onnx_export`` and handed to ``onnxruntime.InferenceSession`` as bytes:
nothing is written to disk, so there is no cache to invalidate and site-packages stays
read-only; the price is the export time at every load (~1 s for MiniLM, reported as
``export_seconds``). Sessions get openhood's one set of options (``ort_session.session_options``:
``threads`` intra-op threads, default the cores available, and all graph optimizations; on our
graph ORT fuses bias + erf-GELU into ``BiasGelu``; attention and Add + LayerNormalization stay
as exported).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from openhood.backends import apply_precision
from openhood.backends.checks import check_inputs, probe
from openhood.backends.ort_session import session_options
from openhood.engine.bert import load_bert
from openhood.engine.fusion import fuse
from openhood.engine.parallel import available_cores


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, model_dir: str | Path | None = None, precision: str = "fp32", threads: int | None = None, fusion: bool = True):
        import onnxruntime as ort

        from openhood.export.onnx_export import graph_to_onnx

        model = load_bert(model_dir)
        graph = apply_precision(fuse(model.graph) if fusion else model.graph, precision, model.folder)
        t0 = time.perf_counter()
        onnx_bytes = graph_to_onnx(graph).SerializeToString()
        self.export_seconds = time.perf_counter() - t0
        self.session = ort.InferenceSession(onnx_bytes, sess_options=session_options(threads), providers=["CPUExecutionProvider"])
        self.config = model.config
        self.model_dir = model.folder
        self.precision = precision
        self.dim = model.config.hidden
        self.max_length = model.config.max_length
        self.normalized = model.config.normalize
        self.threads = threads or available_cores()
        self.fusion = fusion

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask, self.config.max_positions)
        if ids.shape[0] == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        feeds = {"input_ids": ids.astype(np.int64, copy=False), "attention_mask": mask.astype(np.int64, copy=False)}
        return self.session.run(["embedding"], feeds)[0]

    def health(self) -> dict:
        return probe(self)

    def replicate(self) -> OnnxRuntimeBackend:
        """A new session built the same way: a session owns its weights, and keeping the graph
        or the ONNX bytes around only to skip the ~1 s export would hold another model in memory."""
        return OnnxRuntimeBackend(self.model_dir, self.precision, self.threads, self.fusion)

    def close(self) -> None:
        self.session = None

    def __repr__(self) -> str:
        return f"OnnxRuntimeBackend({self.model_dir.name}, {self.precision}, threads={self.threads})"
