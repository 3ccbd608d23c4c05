"""Dynamic batching: a bounded queue per length bucket and one worker thread running the engine.

Who calls what, and when:
- the HTTP layer (event loop) calls ``submit(ids_list)`` once per request with already-tokenized
  sequences; it gets one ``concurrent.futures.Future`` per sequence back at once, or
  ``QueueFullError`` (→ 429) / ``SchedulerStoppedError`` (→ 503). Nothing blocks on inference.
- the worker thread forms a batch from one bucket when it is *full* (``max_batch_size`` rows or
  ``max_batch_tokens`` padded tokens) or when its oldest request has waited ``max_wait_ms``,
  pads it, calls the engine and resolves the futures.
- readiness calls ``run_exclusive(fn)``: ``fn`` runs on the worker thread between batches, so
  the engine is only ever touched by one thread (backends need not be thread-safe) and a wedged
  worker shows up as a probe that does not come back.

The trade-off: one worker means one batch at a time. On a CPU box the engine already uses the
cores (BLAS threads), so a second concurrent batch would only contend; what matters is that the
lock guards the queues only — intake never waits for inference (MISSION.md R8).
Cancellation: a caller cancels its future (its client went away); the worker's
``set_running_or_notify_cancel()`` check right before inference drops it, so dead requests
never cost engine time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from openhood.scheduler.buckets import LengthBuckets

log = logging.getLogger("openhood.scheduler")

EmbedFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (B, T) ids, (B, T) mask → (B, dim)


class QueueFullError(RuntimeError):
    """The bounded queue has no room for the request; retry after ``retry_after_s``."""

    def __init__(self, depth: int, capacity: int, retry_after_s: int):
        super().__init__(f"server overloaded: {depth} of {capacity} queue slots in use")
        self.retry_after_s = retry_after_s


class SchedulerStoppedError(RuntimeError):
    """The scheduler is stopping (the server drains) and takes no new work."""


class BatchFailedError(RuntimeError):
    """The engine raised while running the batch this sequence was in."""


@dataclass(frozen=True)
class BatchInfo:
    """What one engine call looked like; shared by every sequence of the batch."""

    batch_id: int
    bucket: int  # upper bound of the length bucket the batch came from
    size: int  # rows B
    padded_len: int  # T
    real_tokens: int  # sum of unpadded lengths
    started_ns: int  # monotonic: the worker took the batch off the queue
    inference_start_ns: int
    inference_end_ns: int

    @property
    def padded_tokens(self) -> int:
        return self.size * self.padded_len

    @property
    def padding_waste(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens


@dataclass(frozen=True)
class ItemResult:
    vector: np.ndarray  # (dim,) float32
    batch: BatchInfo


@dataclass(eq=False)
class _Item:
    ids: np.ndarray  # (L,) integer token ids, special tokens included
    bucket: int  # index into LengthBuckets
    enqueued_ns: int
    future: Future = field(default_factory=Future)


class DynamicBatcher:
    """Bounded per-bucket queues + one inference worker thread. See the module docstring."""

    def __init__(
        self,
        embed: EmbedFn,
        buckets: LengthBuckets,
        *,
        pad_id: int = 0,
        max_batch_size: int = 32,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 10.0,
        max_queue: int = 1024,
        pad_to: str = "longest",
        on_batch: Callable[[BatchInfo, bool], None] | None = None,
        on_drop: Callable[[int], None] | None = None,
    ):
        if max_batch_size < 1 or max_queue < 1:
            raise ValueError("max_batch_size and max_queue must be >= 1")
        if max_batch_tokens < buckets.bounds[-1]:
            raise ValueError(
                f"max_batch_tokens ({max_batch_tokens}) must hold at least one sequence of the "
                f"largest bucket ({buckets.bounds[-1]})"
            )
        if pad_to not in ("longest", "bucket"):
            raise ValueError(f"pad_to must be 'longest' or 'bucket', got {pad_to!r}")
        self._embed = embed
        self.buckets = buckets
        self.pad_id = pad_id
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_ns = int(max_wait_ms * 1e6)
        self.max_queue = max_queue
        self.pad_to = pad_to
        self._on_batch = on_batch
        self._on_drop = on_drop

        self._cond = threading.Condition()  # guards the fields below, never held during inference
        self._queues: list[deque[_Item]] = [deque() for _ in buckets.bounds]
        self._jobs: deque[tuple[Callable[[], object], Future]] = deque()
        self._depth = 0
        self._stopping = False
        self._busy_since_ns: int | None = None
        self._items_per_s = 0.0  # EWMA of engine throughput, for Retry-After

        self._batch_ids = count(1)
        self._thread = threading.Thread(target=self._run, name="openhood-worker", daemon=True)

    # ---- called from the event loop -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, sequences: Sequence[np.ndarray]) -> list[Future]:
        """Enqueue all sequences of one request, or none of them (all-or-nothing admission)."""
        now = time.monotonic_ns()
        items = [_Item(ids, self.buckets.index(len(ids)), now) for ids in sequences]
        with self._cond:
            if self._stopping:
                raise SchedulerStoppedError("the server is shutting down")
            if self._depth + len(items) > self.max_queue:
                raise QueueFullError(self._depth, self.max_queue, self._retry_after_locked())
            for item in items:
                self._queues[item.bucket].append(item)
            self._depth += len(items)
            self._cond.notify()
        return [item.future for item in items]

    def run_exclusive(self, fn: Callable[[], object]) -> Future:
        """Run ``fn`` on the worker thread before the next batch; its result comes in the future."""
        future: Future = Future()
        with self._cond:
            if self._stopping and not self._thread.is_alive():
                raise SchedulerStoppedError("the worker has stopped")
            self._jobs.append((fn, future))
            self._cond.notify()
        return future

    def stop(self, timeout: float | None = None) -> bool:
        """Take no new work, let the worker finish everything queued, join it. True if it ended."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def queue_depth(self) -> int:
        return self._depth

    @property
    def worker_alive(self) -> bool:
        return self._thread.is_alive()

    def busy_for_s(self) -> float:
        """Seconds the worker has been inside the current batch/job (0 when idle)."""
        since = self._busy_since_ns
        return 0.0 if since is None else (time.monotonic_ns() - since) / 1e9

    # ---- the worker thread -----------------------------------------------------------------

    def _retry_after_locked(self) -> int:
        rate = self._items_per_s
        if rate <= 0:
            return 1
        return int(min(30, max(1, math.ceil(self._depth / rate))))

    def _take_locked(self, now: int) -> tuple[list[_Item] | None, float | None]:
        """Pick the batch to run now (if any) and how long to sleep otherwise."""
        best: tuple[int, int] | None = None  # (head enqueued_ns, bucket index) of the most urgent ready bucket
        next_deadline: int | None = None
        for b, queue in enumerate(self._queues):
            while queue and queue[0].future.cancelled():  # dropped clients don't hold a slot
                queue.popleft()
                self._depth -= 1
                if self._on_drop:
                    self._on_drop(1)
            if not queue:
                continue
            n, _ = self._fit(b, queue)
            deadline = queue[0].enqueued_ns + self.max_wait_ns
            ready = n < len(queue) or n == self.max_batch_size or now >= deadline or self._stopping
            if ready:
                if best is None or queue[0].enqueued_ns < best[0]:
                    best = (queue[0].enqueued_ns, b)
            elif next_deadline is None or deadline < next_deadline:
                next_deadline = deadline
        if best is not None:
            queue = self._queues[best[1]]
            n, _ = self._fit(best[1], queue)
            items = [queue.popleft() for _ in range(n)]
            self._depth -= n
            return items, None
        if next_deadline is None:
            return None, None  # nothing queued: sleep until notified
        return None, max(0.0, (next_deadline - now) / 1e9)

    def _fit(self, bucket: int, queue: deque[_Item]) -> tuple[int, int]:
        """How many head items fit the batch caps, and the padded length they would have."""
        longest = 0
        n = 0
        for item in queue:
            if n == self.max_batch_size:
                break
            length = self.buckets.upper(bucket) if self.pad_to == "bucket" else max(longest, len(item.ids))
            if (n + 1) * length > self.max_batch_tokens:
                break
            longest = length
            n += 1
        return n, longest

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._jobs:
                        fn, job_future = self._jobs.popleft()
                        items = None
                        break
                    items, wait_s = self._take_locked(time.monotonic_ns())
                    if items:
                        break
                    if self._stopping and self._depth == 0:
                        return
                    self._cond.wait(wait_s)
                self._busy_since_ns = time.monotonic_ns()
            try:
                if items is None:
                    if job_future.set_running_or_notify_cancel():
                        try:
                            job_future.set_result(fn())
                        except BaseException as exc:  # the probe reports; the worker goes on
                            job_future.set_exception(exc)
                else:
                    self._run_batch(items)
            except Exception:
                # A bug outside the engine call (e.g. in a metrics callback) must neither kill the
                # worker nor leave callers waiting forever.
                log.exception("the inference worker hit an unexpected error; it keeps running")
                for item in items or ():
                    if not item.future.done():
                        item.future.set_exception(BatchFailedError("internal error while running the batch"))
            finally:
                self._busy_since_ns = None

    def _run_batch(self, items: list[_Item]) -> None:
        started = self._busy_since_ns or time.monotonic_ns()
        live = [it for it in items if it.future.set_running_or_notify_cancel()]
        if len(live) < len(items) and self._on_drop:
            self._on_drop(len(items) - len(live))
        if not live:
            return
        bucket_upper = self.buckets.upper(live[0].bucket)
        lengths = [len(it.ids) for it in live]
        padded_len = bucket_upper if self.pad_to == "bucket" else max(lengths)
        input_ids = np.full((len(live), padded_len), self.pad_id, dtype=np.int64)  # (B, T)
        attention_mask = np.zeros((len(live), padded_len), dtype=np.int64)  # (B, T)
        for row, item in enumerate(live):  # one copy per row, not per token
            input_ids[row, : len(item.ids)] = item.ids
            attention_mask[row, : len(item.ids)] = 1
        t0 = time.monotonic_ns()
        try:
            vectors = np.asarray(self._embed(input_ids, attention_mask), dtype=np.float32)  # (B, dim)
            if vectors.ndim != 2 or vectors.shape[0] != len(live):
                raise RuntimeError(f"engine returned shape {vectors.shape} for a batch of {len(live)}")
        except Exception as exc:
            t1 = time.monotonic_ns()
            log.exception("batch of %d sequences (T=%d) failed in the engine", len(live), padded_len)
            info = BatchInfo(next(self._batch_ids), bucket_upper, len(live), padded_len, sum(lengths), started, t0, t1)
            self._notify(info, False)
            error = BatchFailedError(f"inference failed for a batch of {len(live)}: {type(exc).__name__}")
            for item in live:
                item.future.set_exception(error)
            return
        t1 = time.monotonic_ns()
        info = BatchInfo(next(self._batch_ids), bucket_upper, len(live), padded_len, sum(lengths), started, t0, t1)
        rate = len(live) / max((t1 - started) / 1e9, 1e-6)
        self._items_per_s = rate if self._items_per_s == 0 else 0.8 * self._items_per_s + 0.2 * rate
        for row, item in enumerate(live):
            item.future.set_result(ItemResult(vectors[row], info))
        self._notify(info, True)

    def _notify(self, info: BatchInfo, ok: bool) -> None:
        """Observers (metrics) are told after callers got their results; their bugs stay theirs."""
        if self._on_batch is None:
            return
        try:
            self._on_batch(info, ok)
        except Exception:
            log.exception("on_batch observer failed")
