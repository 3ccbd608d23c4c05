"""Run row-wise work on every core: the compiled kernels and BLAS release the GIL.

BLAS already threads the big matrix products; everything between them (bias, GELU, LayerNorm,
softmax) runs in the numba row kernels of ``engine.kernels.numba_rows``, which NumPy would otherwise run
as ufunc chains on one core. ``RowSplitter`` cuts the rows of an array into one contiguous
range per thread and calls the work once per range; the kernels are compiled with
``nogil=True``, so the threads really run at the same time (with ufunc chains they ping-ponged
the GIL and two threads were slower than one). The threads are the splitter's own (``_Workers``):
a share of the work that no thread has started when the caller has finished the queue is
dropped, not waited for. The trade-off: a thread hand-off costs tens of microseconds, so small
arrays (batch 1, short text) stay on the calling thread.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from openhood.engine.kernels.blas import blas
from openhood.engine.kernels.cores import available_cores

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


class _Workers:
    """``count`` threads that each run the callable posted to them, once per ``post``.

    A job is a share of a common queue of work that the caller drains too: when the caller is
    done and a thread has not started its job yet (the OS has not run it: the other tenant of a
    loaded VM has its core), ``join`` drops that job instead of waiting for the thread to wake
    only to find the queue empty (a ``ThreadPoolExecutor`` future has to run: under load that
    cost up to 2 ms per parallel region, 17 regions per batch-1 EfficientNet pass). The
    counters (post_i, done_i) and the jobs change under one condition's lock, so a wake-up is
    never lost and a job is either taken by its thread or dropped, never both.

    (Polling instead of sleeping, a bounded ``pause`` loop in LLVM IR called through ctypes
    while a graph runs, was tried and measured no faster: the hand-off is then bounded by the
    GIL, which the woken thread must take back and which CPython waits for by sleeping; see
    docs/vision.md § Engine.)"""

    def __init__(self, count: int, initializer: Callable[[], object]):
        self.count = count
        self._post = [0] * count
        self._done = [0] * count
        self._jobs: list[Callable[[], None] | None] = [None] * count
        self._errors: list[BaseException | None] = [None] * count
        self._cond = threading.Condition()
        self._closing = False
        self._threads = [
            threading.Thread(target=self._loop, args=(i, initializer), name=f"openhood-rows-{i}", daemon=True)
            for i in range(count)
        ]
        for t in self._threads:
            t.start()

    def _loop(self, i: int, initializer: Callable[[], object]) -> None:
        initializer()
        cond = self._cond
        seen = 0
        while True:
            with cond:  # take the next job, unless join() dropped it (its share of the queue was done)
                while self._post[i] == seen and not self._closing:
                    cond.wait()
                if self._closing:
                    return
                seen = self._post[i]
                job, self._jobs[i] = self._jobs[i], None
            if job is None:
                continue
            try:
                job()
            except BaseException as e:  # handed to the caller by join()
                self._errors[i] = e
            with cond:  # max: join() may have moved done past a job it dropped meanwhile
                self._done[i] = max(self._done[i], seen)
                cond.notify_all()

    def post(self, job: Callable[[], None]) -> None:
        """Start ``job()`` on every thread."""
        with self._cond:
            for i in range(self.count):
                self._jobs[i] = job
                self._post[i] += 1
            self._cond.notify_all()

    def join(self) -> None:
        """Drop the jobs no thread has started, wait for the started ones; re-raise the first error."""
        with self._cond:
            for i in range(self.count):
                if self._jobs[i] is not None:
                    self._jobs[i] = None
                    self._done[i] = self._post[i]
            while any(d != p for d, p in zip(self._done, self._post, strict=True)):
                self._cond.wait()
        for i, e in enumerate(self._errors):
            if e is not None:
                self._errors[i] = None
                raise e

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def wait_closed(self) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()


class RowSplitter:
    """Apply ``fn(start, stop)`` to disjoint row ranges of an (N, C) problem on ``threads`` threads."""

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads if threads is not None else available_cores())
        # Workers call BLAS only on small blocks (attention's per-head products): keep them
        # single-threaded inside BLAS, the parallelism is ours.
        self._pool = _Workers(self.threads - 1, lambda: blas().set_threads_local(1)) if self.threads > 1 else None
        self._scratch = threading.local()
        self._state = threading.local()
        if self._pool is not None:  # the threads hold the _Workers, not self: an unclosed splitter still stops them
            weakref.finalize(self, self._pool.close)

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

    def thread_state(self) -> dict[str, Any]:
        """A dict of the calling thread's own (e.g. prepared plans whose buffers this thread's
        calls own: two threads running the same splitter's work never share them)."""
        return self._state.__dict__

    def run(
        self, fn: Callable[[int, int], None], n_rows: int, row_width: int, min_elements: int = MIN_PARALLEL_ELEMENTS
    ) -> None:
        """Split ``range(n_rows)`` into one range per thread, ``fn(start, stop)`` once per range
        (the threads take ranges from a shared queue, so a late thread's range is run by the
        others); fewer than ``min_elements`` (n_rows * row_width) run on the calling thread."""
        threads = self.threads
        if self._pool is None or n_rows * row_width < min_elements or n_rows < threads:
            fn(0, n_rows)
            return
        bounds = [n_rows * i // threads for i in range(threads + 1)]
        ranges = itertools.count()  # next() is atomic under the GIL

        def share() -> None:  # every thread takes ranges until none is left
            while (i := next(ranges)) < threads:
                fn(bounds[i], bounds[i + 1])

        self._fork_join(share, share)

    def _fork_join(self, worker_job: Callable[[], None], own_job: Callable[[], None]) -> None:
        """``worker_job()`` on every pool thread and ``own_job()`` here (BLAS on one thread), then wait for all."""
        assert self._pool is not None
        self._pool.post(worker_job)
        previous = blas().set_threads_local(1)
        try:
            own_job()
        finally:
            if previous:
                blas().set_threads_local(previous)
            self._pool.join()

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

        self._fork_join(drain, drain)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.wait_closed()
