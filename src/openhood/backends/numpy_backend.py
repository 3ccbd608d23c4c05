"""The NumPy backend: openhood's own engine (``openhood.engine``) behind the Backend protocol.

Runs a prepared op graph (fused, precision applied: ``backends.prepare_graph``) with an
``Executor``. The trade-off: one executor (one thread pool) per backend; calls are serialized
by the caller (each server worker owns its own backend), the backend itself holds no lock.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np

from openhood.backends.base import check_feeds
from openhood.engine.graph.runtime import Executor, Resumable
from openhood.engine.kernels.blas import blas


class NumpyBackend:
    name = "numpy"

    def __init__(self, graph, precision: str = "fp32", threads: int | None = None):
        self.graph = graph
        self.precision = precision
        self.input_names = tuple(graph.inputs)
        self.output_names = tuple(graph.outputs)
        self.executor = Executor(graph, threads)

    @property
    def threads(self) -> int:
        return int(self.executor.splitter.threads)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(feeds, self.input_names)
        # BLAS threads are per calling thread: a server worker with ``threads=1`` must not let
        # OpenBLAS fan out over every core behind its back (two such workers would fight).
        blas().set_threads_local(self.executor.splitter.threads)
        return self.executor.run({n: np.asarray(feeds[n]) for n in self.input_names})

    def start(self, feeds: Mapping[str, np.ndarray]) -> NumpyPass:
        """A forward pass that runs one layer group per ``step()`` (``Executor.start``): the
        scheduler may run other batches on this backend between steps (preemption). ``run``
        is ``start`` stepped to the end, so both give the same bits."""
        check_feeds(feeds, self.input_names)
        return NumpyPass(self, self.executor.start({n: np.asarray(feeds[n]) for n in self.input_names}))

    def replicate(self, threads: int | None = None) -> NumpyBackend:
        """Same graph (weights are only read during inference, so they are shared, not loaded
        again), its own executor: thread pool and scratch buffers are per instance."""
        twin = copy.copy(self)
        twin.executor = Executor(self.graph, threads or self.executor.splitter.threads)
        return twin

    def close(self) -> None:
        self.executor.close()

    def __repr__(self) -> str:
        return f"NumpyBackend({self.precision}, outputs={self.output_names}, threads={self.executor.splitter.threads})"


class NumpyPass:
    """``Resumable`` with this backend's BLAS threads set before every step: the worker thread
    may have run another engine (the wide one) in between, and BLAS threads are per thread."""

    def __init__(self, backend: NumpyBackend, resumable: Resumable):
        self._threads = backend.executor.splitter.threads
        self._resumable = resumable

    @property
    def steps(self) -> int:
        return self._resumable.steps

    def step(self) -> bool:
        blas().set_threads_local(self._threads)
        return self._resumable.step()

    def result(self) -> dict[str, np.ndarray]:
        return self._resumable.result()

    def close(self) -> None:
        self._resumable.close()
