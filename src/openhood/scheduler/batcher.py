"""Dynamic batching: a bounded queue per length bucket and N worker threads running the model.

The batcher knows items, not tasks: an item is an opaque payload (a token-id array, a feature
vector, a decoded image) with a *length*, its cost in the batch's budget. Text tasks pass token
counts (length buckets, padded-token budget); fixed-shape tasks pass 1 with one bucket
``LengthBuckets((1,))``, so they batch by count through the same code. Each worker's ``run``
function (the served model's, ``openhood.models``) turns a list of payloads and the batch's
padded length into a (B, ...) array: collating/padding, the backend and postprocessing are its
business, not the scheduler's.

Who calls what, and when:
- the HTTP layer (event loop) calls ``submit(payloads, lengths)`` once per request with already
  preprocessed items; it gets one ``concurrent.futures.Future`` per item back at once, or
  ``QueueFullError`` (→ 429) / ``SchedulerStoppedError`` (→ 503). Nothing blocks on inference.
- each worker thread owns one model instance (``run`` function) and forms a batch from one
  bucket when it is *full* (``max_batch_size`` rows or its token budget: see below) or
  when its oldest item has waited ``max_wait_ms``, calls ``run`` and resolves the futures.
- ``short_lane_tokens`` > 0 with 2+ workers makes worker 0 a short lane: it only takes buckets
  up to that many tokens, so short requests always have a worker that no long batch can hold.
- which ready bucket goes first: ``priority="shortest"`` (default) takes the shortest bucket
  unless some bucket's head has waited ``max_age_ms`` (then the oldest of those), so a short
  request never queues behind a backlog of long ones yet long ones cannot starve;
  ``priority="oldest"`` is plain first-come-first-served across buckets.
- readiness and warm-up call ``run_exclusive(fn, worker)``: ``fn`` runs on that worker's thread
  between its batches, so an engine is only ever touched by its own thread (backends need not be
  thread-safe) and a wedged worker shows up as a probe that does not come back.

Adaptive parallelism (``wide_run``): per-worker engines with few threads win under load, but a
lone request on a 1-thread engine leaves the other cores idle. So when every worker is idle
and the queue holds nothing else, the batch starts at once (no ``max_wait_ms``: with nothing
running there is nothing to wait for) on ``wide_run``, an extra engine with every core's
threads; one wide batch at a time. Under load the queue is never empty when a worker takes
work, so the per-worker layout runs (docs/server.md, "Adaptive parallelism"). In between —
open-loop traffic at a fraction of capacity, idle moments between overlapping requests — a
wide batch would hold every core when the next request comes, so the wide engine waits until
no batch has started beside other work for ``wide_quiet_ms`` (sequential traffic: one client).

Token budgets: a short request that finds every worker busy waits for one batch, so below
``surge_items`` queued items each bucket's batches are capped by its own budget (calibrated at
start-up so one batch costs about (TAIL_RATIO - 1) x a lone short item: ``scheduler.calibrate``);
at a surge the backlog dominates latency anyway and every bucket may fill ``max_batch_tokens``,
the budget that maximises throughput.
A bucket holding more than one batch gives its oldest item plus the items of the closest
lengths (``_select``), so a batch pads little; arrival order padded ~20% of a surge's tokens.

The trade-off: on a CPU box every worker's engine shares the same cores, so more workers only
help when each engine is given fewer intra-op threads (``openhood serve --workers 2 --threads
1`` on 2 cores): then a short request can start on one core while a long batch holds the other,
instead of waiting for it, and small batches avoid the cache misses of big ones
(docs/benchmarks.md measures both). The lock guards the queues only — intake never waits for
inference.
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
from typing import Any

import numpy as np

from openhood.scheduler.buckets import LengthBuckets
from openhood.scheduler.policy import BatchPolicy
from openhood.scheduler.preemption import NOMINAL_TOKEN_COST_S, Candidate, Run, StartFn, choose, work_s

log = logging.getLogger("openhood.scheduler")

# (payloads of one batch, padded length T) → (B, ...) outputs, row i for payload i.
RunFn = Callable[[list[Any], int], np.ndarray]


class QueueFullError(RuntimeError):
    """The bounded queue has no room for the request; retry after ``retry_after_s``."""

    def __init__(self, depth: int, capacity: int, retry_after_s: int):
        super().__init__(f"server overloaded: {depth} of {capacity} queue slots in use")
        self.retry_after_s = retry_after_s


class RequestTooLargeError(ValueError):
    """The request alone holds more work than the queue's token cap: it could never be queued."""

    def __init__(self, tokens: int, cap: int):
        super().__init__(
            f"the request holds {tokens} tokens of work; this server queues at most {cap} per model "
            "(what it can finish within its shutdown grace period): split it into smaller requests"
        )


class SchedulerStoppedError(RuntimeError):
    """The scheduler is stopping (the server drains) and takes no new work."""


class BatchSettingsError(ValueError):
    """The batching settings cannot serve this model (a usage mistake: the message says which flag)."""


class BatchFailedError(RuntimeError):
    """The model raised while running the batch this item was in."""


@dataclass(frozen=True)
class BatchInfo:
    """What one model call looked like; shared by every item of the batch."""

    batch_id: int
    bucket: int  # upper bound of the length bucket the batch came from
    size: int  # rows B
    padded_len: int  # T (1 for fixed-shape tasks)
    real_tokens: int  # sum of the items' lengths (tokens; items for fixed-shape tasks)
    started_ns: int  # monotonic: the worker took the batch off the queue
    inference_start_ns: int
    inference_end_ns: int
    wide: bool = False  # ran on the all-cores engine (a lone batch on an idle server)
    preempted_ns: int = 0  # of the inference window, the time it spent suspended (scheduler.preemption)
    yields: int = 0  # times it was preempted

    @property
    def padded_tokens(self) -> int:
        return self.size * self.padded_len

    @property
    def padding_waste(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens


@dataclass(frozen=True)
class ItemResult:
    output: np.ndarray  # this item's row of the batch output, e.g. (dim,) float32
    batch: BatchInfo


@dataclass(eq=False)
class _Item:
    payload: Any  # e.g. (L,) token ids, special tokens included
    length: int  # its cost: tokens, or 1 for fixed-shape items
    bucket: int  # index into LengthBuckets
    enqueued_ns: int
    future: Future[ItemResult] = field(default_factory=Future)


class DynamicBatcher:
    """Bounded per-bucket queues + one inference worker thread per engine. See the module docstring."""

    def __init__(
        self,
        run: RunFn | Sequence[RunFn],
        buckets: LengthBuckets,
        policy: BatchPolicy | None = None,
        *,
        on_batch: Callable[[BatchInfo, bool], None] | None = None,
        on_drop: Callable[[int], None] | None = None,
        name: str = "",
        wide_run: RunFn | None = None,
        start: Sequence[StartFn | None] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ):
        policy = policy or BatchPolicy()
        if policy.max_batch_tokens < buckets.bounds[-1]:
            raise BatchSettingsError(
                f"max_batch_tokens ({policy.max_batch_tokens}) must hold at least one item of the "
                f"largest bucket ({buckets.bounds[-1]}); raise it or lower the model's max length"
            )
        runs = [run] if callable(run) else list(run)
        if not runs or not all(callable(r) for r in runs):
            raise ValueError("run must be a callable or a non-empty sequence of callables (one per worker)")
        # Worker 0 as a short lane: it only takes buckets up to this bound (needs another worker
        # for the rest, so it is off with one worker). Buckets are indices: precompute the limit.
        # Per worker, a resumable pass of its engine (scheduler.preemption) when the policy
        # preempts and the backend can yield; None runs whole batches (ONNX Runtime).
        starts: list[StartFn | None] = list(start) if start is not None else [None] * len(runs)
        if len(starts) != len(runs):
            raise ValueError(f"start needs one entry per worker ({len(runs)}), got {len(starts)}")
        self._starts = starts if policy.preempt else [None] * len(runs)
        # The lane is off when every worker preempts: a short request then never waits for a long
        # batch on any worker, and both cores serve short ones (benchmarks/slo_model.py, 0.5x
        # max: worst bucket P99/P50 3.1 without the lane, 3.6 with it; docs/benchmarks.md).
        preempting = all(s is not None for s in self._starts)
        lane_buckets = sum(1 for b in buckets.bounds if b <= policy.short_lane_tokens)
        lane = policy.short_lane_tokens and len(runs) > 1 and lane_buckets and not preempting
        self._lane_limit = lane_buckets if lane else None
        self._runs = runs
        self._wide_run = wide_run
        # Seconds per padded token per bucket: the preemption policy's work estimates.
        self._token_costs = [NOMINAL_TOKEN_COST_S] * len(buckets.bounds)
        self.buckets = buckets
        self.policy = policy
        self.max_batch_size = policy.max_batch_size
        self.max_batch_tokens = policy.max_batch_tokens
        # Per bucket, used while fewer than surge_items are queued (set_token_budgets); at a surge
        # every bucket may fill max_batch_tokens.
        self._budgets = [policy.max_batch_tokens] * len(buckets.bounds)
        self.surge_items = policy.surge_items
        self.max_wait_ns = int(policy.max_wait_ms * 1e6)
        self.max_queue = policy.max_queue
        # Queued work in item costs (tokens), so a full queue drains within the shutdown grace
        # period whatever the inputs' lengths; the server sets it from the engine's measured speed
        # at start-up (None: items only).
        self.max_queue_tokens: int | None = None
        self.pad_to = policy.pad_to
        self.priority = policy.priority
        self.max_age_ns = int(policy.max_age_ms * 1e6)
        self.wide_quiet_ns = int(policy.wide_quiet_ms * 1e6)
        self._on_batch = on_batch
        self._on_drop = on_drop
        # Monotonic ns; a simulation passes its virtual clock and drives next_batch/batch_done
        # itself (benchmarks/slo_model.py), so the policy it measures is this one.
        self._clock = clock

        self._cond = threading.Condition()  # guards the fields below, never held during inference
        self._queues: list[deque[_Item]] = [deque() for _ in buckets.bounds]
        self._jobs: list[deque[tuple[Callable[[], object], Future[object]]]] = [deque() for _ in runs]  # per worker
        self._depth = 0
        self._queued_tokens = 0  # sum of the queued items' costs
        self._stopping = False
        self._busy_since_ns: list[int | None] = [None] * len(runs)
        self._suspended: list[list[Run]] = [[] for _ in runs]  # per worker: preempted, waiting to resume
        self._overlap_ns: int | None = None  # the last time a batch started beside other work
        self._items_per_s = 0.0  # EWMA of engine throughput (all workers), for Retry-After

        self._batch_ids = count(1)
        prefix = f"openhood-{name}-worker" if name else "openhood-worker"
        self._threads = [
            threading.Thread(target=self._run, args=(w,), name=f"{prefix}-{w}", daemon=True) for w in range(len(runs))
        ]

    # ---- called from the event loop -------------------------------------------------------

    @property
    def workers(self) -> int:
        return len(self._threads)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, payloads: Sequence[Any], lengths: Sequence[int] | None = None) -> list[Future[ItemResult]]:
        """Enqueue all items of one request, or none of them (all-or-nothing admission).
        ``lengths[i]`` is item i's cost; ``None`` → ``len(payload)`` (token-id arrays)."""
        now = self._clock()
        costs = [len(p) for p in payloads] if lengths is None else [int(n) for n in lengths]
        items = [_Item(p, n, self.buckets.index(n), now) for p, n in zip(payloads, costs, strict=True)]
        need, cap = sum(costs), self.max_queue_tokens
        if cap is not None and need > cap:
            raise RequestTooLargeError(need, cap)
        with self._cond:
            if self._stopping:
                raise SchedulerStoppedError("the server is shutting down")
            if self._depth + len(items) > self.max_queue:
                raise QueueFullError(self._depth, self.max_queue, self._retry_after_locked())
            if cap is not None and self._queued_tokens + need > cap:
                raise QueueFullError(self._depth, self.max_queue, self._retry_after_locked())
            for item in items:
                self._queues[item.bucket].append(item)
            self._depth += len(items)
            self._queued_tokens += need
            # Every idle worker looks: a plain notify() could wake only the short lane for a long item.
            self._cond.notify_all()
        return [item.future for item in items]

    def run_exclusive(self, fn: Callable[[], object], worker: int = 0) -> Future[object]:
        """Run ``fn`` on worker ``worker``'s thread before its next batch; its result comes in the future."""
        future: Future[object] = Future()
        with self._cond:
            if not 0 <= worker < len(self._threads):
                raise ValueError(f"worker must be in [0, {len(self._threads)}), got {worker}")
            if self._stopping and not self._threads[worker].is_alive():
                raise SchedulerStoppedError("the worker has stopped")
            self._jobs[worker].append((fn, future))
            self._cond.notify_all()  # the job is for one particular worker
        return future

    def stop(self, timeout: float | None = None) -> bool:
        """Take no new work, let the workers finish everything queued, join them. True if all ended."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def set_token_budgets(self, per_bucket: Sequence[int]) -> None:
        """Per-bucket padded-token budgets below ``surge_items`` queued items (the start-up
        calibration's result); each must hold one item of its bucket, none exceeds ``max_batch_tokens``."""
        budgets = [min(int(t), self.max_batch_tokens) for t in per_bucket]
        if len(budgets) != len(self.buckets) or any(t < b for t, b in zip(budgets, self.buckets.bounds, strict=True)):
            raise ValueError(f"need one budget >= its bound per bucket {self.buckets.bounds}, got {list(per_bucket)}")
        with self._cond:
            self._budgets = budgets

    def set_token_costs(self, per_bucket: Sequence[float]) -> None:
        """Seconds per padded token of each bucket (the calibration's ``cost_per_token``): what the
        preemption policy estimates a batch's work from."""
        costs = [float(c) for c in per_bucket]
        if len(costs) != len(self.buckets) or any(c <= 0 for c in costs):
            raise ValueError(f"need one cost > 0 per bucket {self.buckets.bounds}, got {list(per_bucket)}")
        with self._cond:
            self._token_costs = costs

    @property
    def preemptive(self) -> bool:
        """Some worker runs batches layer by layer and may preempt them."""
        return any(s is not None for s in self._starts)

    @property
    def suspended(self) -> int:
        """Batches preempted now, waiting to resume on their worker."""
        with self._cond:
            return sum(len(s) for s in self._suspended)

    @property
    def token_budgets(self) -> list[int]:
        return list(self._budgets)

    @property
    def queue_depth(self) -> int:
        return self._depth

    @property
    def worker_alive(self) -> bool:
        """Every worker thread is running (one dead worker is a broken server)."""
        return all(t.is_alive() for t in self._threads)

    def busy_for_s(self) -> float:
        """Seconds the longest-busy worker has been inside its current batch/job (0 when all idle)."""
        now = self._clock()
        return max(((now - since) / 1e9 for since in self._busy_since_ns if since is not None), default=0.0)

    # ---- the worker thread -----------------------------------------------------------------

    def _retry_after_locked(self) -> int:
        rate = self._items_per_s * len(self._threads)  # the EWMA is per batch, i.e. per worker
        if rate <= 0:
            return 1
        return int(min(30, max(1, math.ceil(self._depth / rate))))

    def _ready_locked(self, now: int, worker: int = 0) -> tuple[int | None, float | None]:
        """The bucket worker ``worker`` takes its next batch from now (if any) and how long to
        sleep otherwise."""
        limit = self._lane_limit if worker == 0 else None  # the short lane sees only its buckets
        oldest: tuple[int, int] | None = None  # (head enqueued_ns, bucket index) of the oldest ready bucket
        shortest: int | None = None  # index of the shortest ready bucket
        overdue: tuple[int, int] | None = None  # the oldest ready bucket whose head waited max_age
        next_deadline: int | None = None
        # Nothing running anywhere (the caller's own slot is already clear): no batch-mate can
        # come from waiting out a running batch, so a queued item goes at once.
        idle = self._idle_locked()
        for b, queue in enumerate(self._queues if limit is None else self._queues[:limit]):
            while queue and queue[0].future.cancelled():  # dropped clients don't hold a slot
                self._queued_tokens -= queue.popleft().length
                self._depth -= 1
                if self._on_drop:
                    self._on_drop(1)
            if not queue:
                continue
            n = self._fifo_fit(b, queue)  # < len(queue) exactly when the queue does not fit one batch
            deadline = queue[0].enqueued_ns + self.max_wait_ns
            ready = n < len(queue) or n == self.max_batch_size or now >= deadline or self._stopping or idle
            if ready:
                head = (queue[0].enqueued_ns, b)
                if oldest is None or head < oldest:
                    oldest = head
                if shortest is None:
                    shortest = b
                if now - head[0] >= self.max_age_ns and (overdue is None or head < overdue):
                    overdue = head
            elif next_deadline is None or deadline < next_deadline:
                next_deadline = deadline
        if oldest is not None:
            if self.priority == "oldest":
                return oldest[1], None
            return (overdue[1] if overdue is not None else shortest), None
        if next_deadline is None:
            return None, None  # nothing queued: sleep until notified
        return None, max(0.0, (next_deadline - now) / 1e9)

    def _pop_locked(self, pick: int, chosen: list[int]) -> list[_Item]:
        """Take queue positions ``chosen`` (``_select``'s) of bucket ``pick`` off the queue."""
        queue = self._queues[pick]
        if len(chosen) == len(queue) or chosen[-1] == len(chosen) - 1:  # a FIFO prefix
            items = [queue.popleft() for _ in chosen]
        else:
            taken = set(chosen)
            items = [queue[i] for i in chosen]
            rest = [item for i, item in enumerate(queue) if i not in taken]
            queue.clear()
            queue.extend(rest)
        self._depth -= len(items)
        self._queued_tokens -= sum(item.length for item in items)
        return items

    def _padded_len(self, bucket: int, lengths: Sequence[int]) -> int:
        return self.buckets.upper(bucket) if self.pad_to == "bucket" else max(lengths)

    def _candidate_locked(self, pick: int) -> tuple[list[int], Candidate]:
        """The batch bucket ``pick`` would give now: its queue positions and its work estimate."""
        queue = self._queues[pick]
        chosen = self._select(pick, queue)
        padded = self._padded_len(pick, [queue[i].length for i in chosen])
        head = min(queue[i].enqueued_ns for i in chosen)
        return chosen, Candidate(work_s(len(chosen), padded, self._token_costs[pick]), head)

    def _budget(self, bucket: int) -> int:
        """Padded tokens one batch of ``bucket`` may hold now: the surge budget once the backlog
        reaches ``surge_items``, else the bucket's calibrated one."""
        return self.max_batch_tokens if self._depth >= self.surge_items else self._budgets[bucket]

    def _fifo_fit(self, bucket: int, queue: deque[_Item]) -> int:
        """How many items from the head, in arrival order, fit one batch's caps (>= 1)."""
        budget = self._budget(bucket)
        cap = self.max_batch_size
        if self.pad_to == "bucket":
            return min(len(queue), cap, max(1, budget // self.buckets.upper(bucket)))
        longest = 0
        n = 0
        for item in queue:
            if n == cap or (n + 1) * max(longest, item.length) > budget:
                break
            longest = max(longest, item.length)
            n += 1
        return n

    def _select(self, bucket: int, queue: deque[_Item]) -> list[int]:
        """Queue positions of the batch this bucket would run now, in the order they go in.

        The head (oldest item) is always in it, so every item leaves in bounded time. When the
        whole queue fits the caps, it is the whole queue in order. When it does not (a backlog
        in this bucket: a surge), the rest of the batch is the queued items whose lengths are
        closest to the head's, not the next ones in line: a bucket spans lengths (1-48 tokens
        for the first), and a batch taken in arrival order pads every row to its longest —
        ~20% of the padded tokens at 64 clients on the dev corpus, engine time spent on zeros.
        Items passed over wait for a later batch of their own length (at the latest until they
        are the head). With ``pad_to="bucket"`` every row pads to the bucket bound anyway: order.
        """
        n = self._fifo_fit(bucket, queue)
        if n == len(queue) or self.pad_to == "bucket":
            # Everything fits (in any order: the batch pads to its longest either way), or every
            # row pads to the bucket bound: arrival order.
            return list(range(n))
        budget = self._budget(bucket)
        cap = self.max_batch_size
        head = queue[0].length
        # Closest length to the head's first, ties in arrival order; O(k log k) on one bucket's queue.
        order = sorted(range(1, len(queue)), key=lambda i: (abs(queue[i].length - head), i))
        chosen = [0]
        longest = head
        for i in order:
            if len(chosen) == cap:
                break
            length = max(longest, queue[i].length)
            if (len(chosen) + 1) * length <= budget:
                chosen.append(i)
                longest = length
        return sorted(chosen)

    def next_batch(self, worker: int) -> tuple[list[_Item] | None, float | None, bool]:
        """Under the lock: the batch worker ``worker`` starts now, marked busy, and whether it
        runs on the wide engine — ``(items, None, wide)`` — or ``(None, sleep_s, False)`` with
        how long to sleep (None: until notified). ``next_run`` with the batch's items only."""
        run, wait_s, wide = self.next_run(worker)
        return (run.items if run is not None else None), wait_s, wide

    def next_run(self, worker: int) -> tuple[Run | None, float | None, bool]:
        """Under the lock: what worker ``worker`` runs now, marked busy — a new batch off the
        queue or, with preemption, one it suspended earlier (``run.done_steps`` > 0) — and
        whether it runs on the wide engine: ``(run, None, wide)``, or ``(None, sleep_s, False)``
        with how long to sleep (None: until notified). The worker loop's first step; a
        simulation in virtual time calls it directly (then ``yield_point`` after each layer
        group of a preemptible run, ``batch_done`` at its end)."""
        with self._cond:
            return self._next_run_locked(worker)

    def yield_point(self, worker: int, run: Run) -> Run:
        """Worker ``worker`` finished one more layer group of ``run`` (not its last): the run
        its next group comes from — ``run`` itself, or (``run`` is then suspended on this
        worker) a suspended one or a new batch off the queue (``scheduler.preemption.choose``)."""
        with self._cond:
            return self._yield_locked(worker, run)

    def _idle_locked(self) -> bool:
        """No worker is inside a batch or job (so no wide batch either: it runs on a worker) or
        holds a suspended one. A start time of 0 counts as busy: a virtual clock starts there."""
        return all(since is None for since in self._busy_since_ns) and not any(self._suspended)

    def _next_run_locked(self, worker: int) -> tuple[Run | None, float | None, bool]:
        now = self._clock()
        suspended = self._suspended[worker]
        self._purge_locked(suspended)
        pick, wait_s = self._ready_locked(now, worker)
        if suspended:
            chosen, fresh = self._candidate_locked(pick) if pick is not None else ([], None)
            choice = choose(None, suspended, fresh, now, self.max_age_ns)
            if isinstance(choice, Run):
                suspended.remove(choice)
                choice.resume(now)
                self._busy_since_ns[worker] = now
                return choice, None, False
            assert pick is not None  # choose() only returns a candidate it was given
            self._busy_since_ns[worker] = now
            self._overlap_ns = now  # started beside suspended work: traffic overlaps (no wide engine)
            return self._start_run_locked(pick, chosen, now), None, False
        if pick is None:
            return None, wait_s, False
        chosen = self._select(pick, self._queues[pick])
        run = self._start_run_locked(pick, chosen, now)
        lone = self._depth == 0 and self._idle_locked()
        if not lone:
            self._overlap_ns = now
        # A lone batch on an idle server, while traffic is sequential: every core's threads for it.
        sequential = self._overlap_ns is None or now - self._overlap_ns >= self.wide_quiet_ns
        run.wide = self._wide_run is not None and lone and sequential
        self._busy_since_ns[worker] = now
        return run, None, run.wide

    def _start_run_locked(self, pick: int, chosen: list[int], now: int) -> Run:
        items = self._pop_locked(pick, chosen)
        padded = self._padded_len(pick, [it.length for it in items])
        return Run(
            items,
            pick,
            padded,
            work_s(len(items), padded, self._token_costs[pick]),
            min(it.enqueued_ns for it in items),
            now,
        )

    def _yield_locked(self, worker: int, run: Run) -> Run:
        run.done_steps += 1
        now = self._clock()
        suspended = self._suspended[worker]
        self._purge_locked(suspended)
        pick, _ = self._ready_locked(now, worker)
        chosen: list[int] = []
        fresh = None
        # A batch another idle worker can take goes there: preempting would only delay this one.
        if pick is not None and not self._idle_worker_for(pick, worker):
            chosen, fresh = self._candidate_locked(pick)
        choice = choose(run, suspended, fresh, now, self.max_age_ns)
        if choice is run:
            return run
        run.suspend(now)
        suspended.append(run)
        if isinstance(choice, Run):
            suspended.remove(choice)
            choice.resume(now)
            return choice
        assert pick is not None  # choose() only returns a candidate it was given
        self._overlap_ns = now  # a batch that preempts another overlaps it (no wide engine)
        return self._start_run_locked(pick, chosen, now)

    def _idle_worker_for(self, bucket: int, worker: int) -> bool:
        """Some worker other than ``worker`` is idle and may take ``bucket`` (the short lane
        takes only its own buckets)."""
        return any(
            since is None
            and not self._suspended[w]
            and (w != 0 or self._lane_limit is None or bucket < self._lane_limit)
            for w, since in enumerate(self._busy_since_ns)
            if w != worker
        )

    def _purge_locked(self, suspended: list[Run]) -> None:
        """Drop suspended runs whose every item was cancelled (their clients left): the pass's
        activations are freed at once, not when the run would have resumed."""
        for run in [r for r in suspended if all(it.future.cancelled() for it in r.items)]:
            suspended.remove(run)
            if run.resumable is not None:
                run.resumable.close()
            if self._on_drop:
                self._on_drop(len(run.items))

    def _run(self, worker: int) -> None:
        run = self._runs[worker]
        jobs = self._jobs[worker]
        while True:
            with self._cond:
                while True:
                    if jobs:
                        fn, job_future = jobs.popleft()
                        items, run_, wide = None, None, False
                        self._busy_since_ns[worker] = self._clock()
                        break
                    run_, wait_s, wide = self._next_run_locked(worker)
                    items = run_.items if run_ is not None else None
                    if items:
                        if self._depth and len(self._threads) > 1:
                            self._cond.notify_all()  # more work queued: an idle worker may take it
                        break
                    if self._stopping and self._depth == 0:
                        return
                    self._cond.wait(wait_s)
            released = False

            def release(worker: int = worker, wide: bool = wide) -> None:
                nonlocal released
                if not released:
                    released = True
                    self.batch_done(worker, wide)

            try:
                if items is None:
                    if job_future.set_running_or_notify_cancel():
                        try:
                            job_future.set_result(fn())
                        except BaseException as exc:  # the probe reports; the worker goes on
                            job_future.set_exception(exc)
                elif run_ is not None and not wide and (run_.resumable is not None or self._starts[worker]):
                    self._run_steps(worker, run_, release)
                else:
                    self._run_batch(
                        items,
                        self._wide_run if wide else run,  # type: ignore[arg-type]  # wide only when set
                        self._busy_since_ns[worker],
                        wide,
                        release=release,
                    )
            except Exception:
                # A bug outside the engine call (e.g. in a metrics callback) must neither kill the
                # worker nor leave callers waiting forever.
                log.exception("the inference worker hit an unexpected error; it keeps running")
                for item in items or ():
                    if not item.future.done():
                        item.future.set_exception(BatchFailedError("internal error while running the batch"))
            finally:
                release()

    def batch_done(self, worker: int, wide: bool) -> None:
        """The worker is idle again (once per batch or job; the worker loop's last step). Called
        as soon as its engine returns, before the results go out: a lone client's next request
        can arrive while this thread is still delivering and reporting the last batch, and it
        must find the server idle (the wide engine, no ``max_wait_ms``), not busy (it then
        waited out ``max_wait_ms``: ~1% of the 1-client requests had 2-3 ms of queue time, 4 Dec)."""
        with self._cond:
            self._busy_since_ns[worker] = None
            if wide and self._depth:
                self._cond.notify_all()  # items queued during the wide batch may go now

    def _run_steps(self, worker: int, run: Run, release: Callable[[], None]) -> None:
        """Run ``run`` layer group by layer group, switching at each boundary to what
        ``yield_point`` picks, until one run completes (the worker then starts over: a suspended
        run may be next). Items stay cancellable until delivered: a run whose every client left
        is dropped at its next boundary."""
        start = self._starts[worker]
        assert start is not None  # only preemptible workers come here
        current: Run | None = run
        while current is not None:
            if all(it.future.cancelled() for it in current.items):
                if current.resumable is not None:
                    current.resumable.close()
                if self._on_drop:
                    self._on_drop(len(current.items))
                return
            try:
                if current.resumable is None:  # a new batch: its pass starts
                    live = [it for it in current.items if not it.future.cancelled()]
                    if len(live) < len(current.items) and self._on_drop:
                        self._on_drop(len(current.items) - len(live))
                    current.items = live
                    current.padded_len = self._padded_len(current.bucket, [it.length for it in live])
                    current.inference_start_ns = self._clock()
                    current.resumable = start([it.payload for it in live], current.padded_len)
                    current.steps = current.resumable.steps
                done = current.resumable.step()
            except Exception as exc:
                self._fail_run(worker, current, exc)
                return
            if done:
                self._deliver(worker, current, release)
                return
            current = self.yield_point(worker, current)

    def _info(self, run: Run, end_ns: int) -> BatchInfo:
        lengths = [it.length for it in run.items]
        return BatchInfo(
            next(self._batch_ids),
            self.buckets.upper(run.bucket),
            len(run.items),
            run.padded_len,
            sum(lengths),
            run.started_ns,
            run.inference_start_ns or end_ns,
            end_ns,
            False,
            run.preempted_ns,
            run.yields,
        )

    def _deliver(self, worker: int, run: Run, release: Callable[[], None]) -> None:
        assert run.resumable is not None
        try:
            outputs = np.asarray(run.resumable.result())  # (B, ...)
            if outputs.ndim < 1 or outputs.shape[0] != len(run.items):
                raise RuntimeError(f"the model returned shape {outputs.shape} for a batch of {len(run.items)}")
        except Exception as exc:
            self._fail_run(worker, run, exc)
            return
        info = self._info(run, self._clock())
        busy_s = max((info.inference_end_ns - run.started_ns - run.preempted_ns) / 1e9, 1e-6)
        rate = len(run.items) / busy_s
        self._items_per_s = rate if self._items_per_s == 0 else 0.8 * self._items_per_s + 0.2 * rate
        release()
        dropped = 0
        for row, item in enumerate(run.items):
            if item.future.set_running_or_notify_cancel():
                item.future.set_result(ItemResult(outputs[row], info))
            else:
                dropped += 1
        if dropped and self._on_drop:
            self._on_drop(dropped)
        self._notify(info, True)

    def _fail_run(self, worker: int, run: Run, exc: Exception) -> None:
        """A resumable pass raised: its items rerun alone on the whole-batch path (``_isolate``)."""
        if run.resumable is not None:
            run.resumable.close()
        log.exception("batch of %d items (T=%d) failed in the model", len(run.items), run.padded_len)
        self._notify(self._info(run, self._clock()), False)
        live = [it for it in run.items if it.future.set_running_or_notify_cancel()]
        if len(live) < len(run.items) and self._on_drop:
            self._on_drop(len(run.items) - len(live))
        if len(live) > 1:
            self._isolate(live, self._runs[worker], self.buckets.upper(run.bucket), False)
        elif live:
            live[0].future.set_exception(BatchFailedError(f"inference failed for this input: {type(exc).__name__}"))

    def _run_batch(
        self,
        items: list[_Item],
        run: RunFn,
        started: int | None,
        wide: bool = False,
        release: Callable[[], None] | None = None,
    ) -> None:
        started = started or self._clock()
        live = [it for it in items if it.future.set_running_or_notify_cancel()]
        if len(live) < len(items) and self._on_drop:
            self._on_drop(len(items) - len(live))
        if not live:
            return
        bucket_upper = self.buckets.upper(live[0].bucket)
        lengths = [it.length for it in live]
        padded_len = bucket_upper if self.pad_to == "bucket" else max(lengths)
        t0 = self._clock()
        try:
            outputs = np.asarray(run([it.payload for it in live], padded_len))  # (B, ...)
            if outputs.ndim < 1 or outputs.shape[0] != len(live):
                raise RuntimeError(f"the model returned shape {outputs.shape} for a batch of {len(live)}")
        except Exception as exc:
            t1 = self._clock()
            log.exception("batch of %d items (T=%d) failed in the model", len(live), padded_len)
            info = BatchInfo(
                next(self._batch_ids), bucket_upper, len(live), padded_len, sum(lengths), started, t0, t1, wide
            )
            self._notify(info, False)
            if len(live) > 1:
                self._isolate(live, run, bucket_upper, wide)
            else:
                live[0].future.set_exception(BatchFailedError(f"inference failed for this input: {type(exc).__name__}"))
            return
        t1 = self._clock()
        info = BatchInfo(
            next(self._batch_ids), bucket_upper, len(live), padded_len, sum(lengths), started, t0, t1, wide
        )
        rate = len(live) / max((t1 - started) / 1e9, 1e-6)
        self._items_per_s = rate if self._items_per_s == 0 else 0.8 * self._items_per_s + 0.2 * rate
        if release is not None:
            release()
        for row, item in enumerate(live):
            item.future.set_result(ItemResult(outputs[row], info))
        self._notify(info, True)

    def _isolate(self, items: list[_Item], run: RunFn, bucket_upper: int, wide: bool) -> None:
        """A batch failed: run each item alone, so only the items that fail on their own fail.

        One bad item (an input the model chokes on) then costs its own request a 500, never its
        batch-mates'; a model that fails for everything fails each item again, at the price of
        one extra single-row call per item of the failed batch (rare, bounded by the batch size)."""
        for item in items:
            padded_len = bucket_upper if self.pad_to == "bucket" else item.length
            started = t0 = self._clock()
            try:
                row = np.asarray(run([item.payload], padded_len))
                if row.ndim < 1 or row.shape[0] != 1:
                    raise RuntimeError(f"the model returned shape {row.shape} for a batch of 1")
            except Exception as exc:
                info = BatchInfo(
                    next(self._batch_ids), bucket_upper, 1, padded_len, item.length, started, t0, self._clock(), wide
                )
                self._notify(info, False)
                log.warning("an item of a failed batch failed alone too: its request fails")
                item.future.set_exception(BatchFailedError(f"inference failed for this input: {type(exc).__name__}"))
                continue
            info = BatchInfo(
                next(self._batch_ids), bucket_upper, 1, padded_len, item.length, started, t0, self._clock(), wide
            )
            item.future.set_result(ItemResult(row[0], info))
            self._notify(info, True)

    def _notify(self, info: BatchInfo, ok: bool) -> None:
        """Observers (metrics) are told after callers got their results; their bugs stay theirs."""
        if self._on_batch is None:
            return
        try:
            self._on_batch(info, ok)
        except Exception:
            log.exception("on_batch observer failed")
