"""Layer-granular preemption: which of a worker's batches runs its next layer.

Without it a batch, once started, runs to the end: a 20-token request that arrives while a
256-token batch runs waits for all of its layers. With it (``BatchPolicy.preempt``, a backend
that can yield: the NumPy engine's ``Executor.start``), a worker runs its batch one layer group
at a time and, at every boundary, picks what runs next among the batch in progress, the batches
it suspended earlier (their activations stay in its engine's memory: they resume on the same
worker) and the batch the queue would give it now:

- **shortest remaining work first**: a batch's work is its padded tokens × the calibrated cost
  per token of its bucket (``scheduler.calibrate``), and what remains is that × the share of its
  layers still to run; a queued batch with less work than what remains of the running one
  preempts it (ties keep the running one), an approximation of processor sharing that favours
  short requests;
- **ageing**: every batch has a deadline, its oldest item's arrival + max(``max_age_ms``,
  ``TAIL_RATIO`` × its own work): a long request may be passed over until it has waited about
  as long as the SLO lets its bucket take. Past its deadline a batch is *overdue*: overdue
  batches go before any other (earliest deadline first) and a running overdue batch is never
  preempted. The bound: a request finishes at the latest at its deadline + the overdue work
  ahead of it on its worker (batches with earlier deadlines, and the rest of an overdue batch
  already running; all bounded by the queue's token cap) + one layer group of a batch that was
  not overdue + its own remaining work. Nothing is starved.

Overhead is bounded too: a batch yields at most once per layer group (5 times for a 6-layer
encoder), and a yield costs one decision under the batcher's lock (counted: ``Run.yields``).
The trade-off: a suspended batch keeps its (N, C) activations in memory while others run (a
few MB), and the engine's caches go cold across the switch; backends that cannot yield (ONNX
Runtime runs a whole graph per call) simply never preempt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from openhood.scheduler.policy import TAIL_RATIO

# Seconds per padded token before the start-up calibration measured the engine's (a 1-thread
# MiniLM layer stack on this Zen 3 box: ~0.4 ms per token, scheduler.calibrate's example); only
# the deadlines use its scale, the work comparisons are relative.
NOMINAL_TOKEN_COST_S = 4e-4


class Resumable(Protocol):
    """One engine pass in steps (``models.served.ServedModel.start``)."""

    @property
    def steps(self) -> int: ...

    def step(self) -> bool:
        """Run the next layer group; True when the pass is complete."""
        ...

    def result(self) -> np.ndarray:
        """(B, ...) output rows, once complete."""
        ...

    def close(self) -> None:
        """Drop the pass's activations (a cancelled or failed batch)."""
        ...


# (payloads of one batch, padded length T) → a pass over them, not yet started.
StartFn = Callable[[list[Any], int], Resumable]


@dataclass(eq=False)
class Run:
    """A batch a worker took off the queue, from its first layer to its result."""

    items: list[Any]  # the batcher's queue items (payload, length, future, enqueued_ns)
    bucket: int  # index into the batcher's LengthBuckets
    padded_len: int
    work_s: float  # estimated engine seconds of the whole batch (padded tokens × cost per token)
    head_ns: int  # arrival of its oldest item
    started_ns: int  # taken off the queue
    steps: int = 1  # layer groups of its pass (set when the pass starts)
    done_steps: int = 0
    resumable: Resumable | None = None  # None in a virtual-time simulation
    inference_start_ns: int = 0
    suspended_ns: int | None = None  # when it was last preempted, while it waits to resume
    preempted_ns: int = 0  # total time spent suspended
    yields: int = 0
    wide: bool = False  # on the all-cores engine: never preempted
    extra: dict[str, Any] = field(default_factory=dict)  # a simulation's own bookkeeping

    @property
    def remaining_s(self) -> float:
        return self.work_s * (self.steps - self.done_steps) / max(1, self.steps)

    def deadline_ns(self, max_age_ns: int) -> int:
        return self.head_ns + max(max_age_ns, int(TAIL_RATIO * self.work_s * 1e9))

    def suspend(self, now: int) -> None:
        self.suspended_ns = now
        self.yields += 1

    def resume(self, now: int) -> None:
        if self.suspended_ns is not None:
            self.preempted_ns += now - self.suspended_ns
            self.suspended_ns = None


def work_s(rows: int, padded_len: int, cost_per_token: float) -> float:
    return rows * padded_len * cost_per_token


@dataclass(frozen=True)
class Candidate:
    """The batch the queue would give the worker now, before it is taken off the queue."""

    work_s: float
    head_ns: int

    def deadline_ns(self, max_age_ns: int) -> int:
        return self.head_ns + max(max_age_ns, int(TAIL_RATIO * self.work_s * 1e9))


def choose(
    running: Run | None, suspended: Sequence[Run], fresh: Candidate | None, now: int, max_age_ns: int
) -> Run | Candidate | None:
    """What runs the next layer group: ``running``, one of ``suspended`` or the ``fresh`` batch.

    An overdue running batch always goes on; otherwise overdue batches first (earliest deadline),
    then the least remaining work; ties go to the running batch, then the suspended ones in
    order, then the fresh one (so a switch needs strictly less work)."""
    if running is not None and running.deadline_ns(max_age_ns) <= now:
        return running

    def key(option: Run | Candidate) -> tuple[int, float]:
        deadline = option.deadline_ns(max_age_ns)
        if deadline <= now:
            return (0, float(deadline))
        return (1, option.remaining_s if isinstance(option, Run) else option.work_s)

    options: list[Run | Candidate] = [*([running] if running is not None else []), *suspended]
    if fresh is not None:
        options.append(fresh)
    return min(options, key=key, default=None)  # min keeps the first of equal keys
