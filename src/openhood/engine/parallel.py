"""Run row-wise work on every core: the compiled kernels and BLAS release the GIL.

BLAS already threads the big matrix products; everything between them (bias, GELU, LayerNorm,
softmax) runs in the numba row kernels of ``engine.kernels``, which NumPy would otherwise run
as ufunc chains on one core. ``RowSplitter`` cuts the rows of an array into one contiguous
range per thread and calls the work once per range; the kernels are compiled with
``nogil=True``, so the threads really run at the same time (with ufunc chains they ping-ponged
the GIL and two threads were slower than one). The trade-off: a thread hand-off costs tens of
microseconds, so small arrays (batch 1, short text) stay on the calling thread.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from openhood.engine.blas import blas
from openhood.engine.cores import available_cores

if TYPE_CHECKING:
    import numpy as np

# Smallest scratch buffer (64 KiB of float32): small requests reuse one buffer.
MIN_SCRATCH_ELEMENTS = 16384
# Largest buffer a thread keeps per key (64 MiB of float32). A scratch buffer only grows to the
# largest shape seen, so memory is bounded by the biggest request; this caps even that: a
# bigger one (an unusually long input, a huge image) gets a one-off array, freed after use.
MAX_KEPT_SCRATCH_ELEMENTS = 1 << 24
# Below this many elements one thread is faster than waking the pool. Waking a sleeping worker
# costs ~0.1-0.3 ms on this VM (measured: GELU on batch 1's (52, 1536) took 0.41 ms on 2 threads
# vs ~0.08 ms of work on one), so cheap elementwise kernels (~1 ns/element) wait for ~0.5 M
# elements; attention (two GEMMs + softmax per score, ~5 ns) splits much earlier.
MIN_PARALLEL_ELEMENTS = 65536
MIN_PARALLEL_ELEMENTWISE = 1 << 19


class RowSplitter:
    """Apply ``fn(start, stop)`` to disjoint row ranges of an (N, C) problem on ``threads`` threads."""

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads if threads is not None else available_cores())
        # Workers call BLAS only on small blocks (attention's per-head products): keep them
        # single-threaded inside BLAS, the parallelism is ours.
        self._pool = (
            ThreadPoolExecutor(
                self.threads - 1,
                thread_name_prefix="openhood-rows",
                initializer=blas().set_threads_local,
                initargs=(1,),
            )
            if self.threads > 1
            else None
        )
        self._scratch = threading.local()

    def scratch(self, key: str, shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
        """A per-thread reusable buffer (no allocation in the hot loop); one per ``key`` and
        thread, at most ``MAX_KEPT_SCRATCH_ELEMENTS`` kept."""
        import numpy as np

        store = self._scratch.__dict__
        size = 1
        for s in shape:
            size *= s
        if size > MAX_KEPT_SCRATCH_ELEMENTS:
            return np.empty(shape, dtype=dtype)
        buf = store.get(key)
        if buf is None or buf.size < size or buf.dtype != np.dtype(dtype):
            buf = np.empty(max(size, MIN_SCRATCH_ELEMENTS), dtype=dtype)
            store[key] = buf
        return buf[:size].reshape(shape)

    def run(
        self, fn: Callable[[int, int], None], n_rows: int, row_width: int, min_elements: int = MIN_PARALLEL_ELEMENTS
    ) -> None:
        """Split ``range(n_rows)`` across the threads: ``fn(start, stop)`` once per thread;
        fewer than ``min_elements`` (n_rows * row_width) run on the calling thread."""
        threads = self.threads
        if self._pool is None or n_rows * row_width < min_elements or n_rows < threads:
            fn(0, n_rows)
            return
        bounds = [n_rows * i // threads for i in range(threads + 1)]
        futures = [self._pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, threads)]
        previous = blas().set_threads_local(1)
        try:
            fn(bounds[0], bounds[1])
        finally:
            if previous:
                blas().set_threads_local(previous)
        for f in futures:
            f.result()

    def run_chunks(
        self,
        fn: Callable[[int, int], None],
        n_rows: int,
        chunk: int,
        row_width: int,
        min_elements: int = MIN_PARALLEL_ELEMENTS,
    ) -> None:
        """Like ``run`` but dynamic: every thread takes the next ``chunk`` rows until none are
        left. On a loaded machine a thread that is descheduled for a while then costs only its
        current chunk, not half of the work (the others take the rest)."""
        if self._pool is None or n_rows * row_width < min_elements or n_rows <= chunk:
            fn(0, n_rows)
            return
        chunks = itertools.count()  # next() is atomic under the GIL

        def drain() -> None:
            while (start := next(chunks) * chunk) < n_rows:
                fn(start, min(start + chunk, n_rows))

        futures = [self._pool.submit(drain) for _ in range(1, self.threads)]
        previous = blas().set_threads_local(1)
        try:
            drain()
        finally:
            if previous:
                blas().set_threads_local(previous)
        for f in futures:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
