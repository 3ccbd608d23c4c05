"""The NumPy backend: openhood's own engine (``openhood.engine``) behind the Backend protocol.

Loads the folder into the unfused op graph, applies the fusion passes (``fusion=False`` keeps
the textbook graph, for benchmarks and debugging), then the precision, and runs it with an
``Executor``. The trade-off: one executor (one thread pool) per backend; calls are serialized
by the caller (each server worker owns its own backend), the backend itself holds no lock.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from openhood.backends import apply_precision
from openhood.backends.checks import check_inputs, probe
from openhood.engine.bert import load_bert
from openhood.engine.blas import blas
from openhood.engine.fusion import fuse
from openhood.engine.runtime import Executor


class NumpyBackend:
    name = "numpy"

    def __init__(self, model_dir: str | Path | None = None, precision: str = "fp32", fusion: bool = True, threads: int | None = None):
        model = load_bert(model_dir)
        graph = fuse(model.graph) if fusion else model.graph
        self.graph = apply_precision(graph, precision, model.folder)
        self.config = model.config
        self.model_dir = model.folder
        self.precision = precision
        self.fusion = fusion
        self.dim = model.config.hidden
        self.max_length = model.config.max_length
        self.normalized = model.config.normalize
        self.executor = Executor(self.graph, threads)

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask, self.config.max_positions)
        if ids.shape[0] == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # BLAS threads are per calling thread: a server worker with ``threads=1`` must not let
        # OpenBLAS fan out over every core behind its back (two such workers would fight).
        blas().set_threads_local(self.executor.splitter.threads)
        return self.executor.run({"input_ids": ids, "attention_mask": mask})["embedding"]

    def health(self) -> dict:
        return probe(self)

    def replicate(self) -> NumpyBackend:
        """Same graph (weights are only read during inference, so they are shared, not loaded
        again), its own executor: thread pool and scratch buffers are per instance."""
        twin = copy.copy(self)
        twin.executor = Executor(self.graph, self.executor.splitter.threads)
        return twin

    def close(self) -> None:
        self.executor.close()

    def __repr__(self) -> str:
        return f"NumpyBackend({self.model_dir.name}, {self.precision}, fusion={self.fusion})"
