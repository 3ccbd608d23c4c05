"""Token budgets per length bucket, derived at start-up from the engine's measured speed.

A batch is what a short request may find in front of it when every worker is busy: it waits up
to one batch, then runs. For its latency to stay within ``TAIL_RATIO`` × a lone short
request's (the SLO: P99 ≤ 3 × P50 per length bucket), one batch may cost at most
(``TAIL_RATIO`` − 1) × the engine's time for one item of the shortest bucket. The calibration
measures that time (best of ``lone_repeats``: a short call is cheap to repeat) and the cost per
padded token of every bucket (one batch of ~``PROBE_TOKENS`` tokens each, after the warm-up),
and each bucket's budget is the most tokens whose batch stays within that time at that bucket's
cost — at least one item of the bucket, at most ``max_tokens`` (the surge budget:
``DynamicBatcher`` lets batches fill it when a backlog builds up, where throughput matters more
than the length of one batch).

The trade-off: a measurement of a few hundred milliseconds at start-up, on whatever else the
machine is doing at that moment (a loaded start measures higher costs and so gets smaller,
safer budgets); ``openhood serve --max-batch-tokens`` skips it.

>>> token_budget(0.010, 4e-4, min_tokens=48, max_tokens=512)
48
>>> token_budget(0.100, 4e-4, min_tokens=48, max_tokens=512)
496
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openhood.scheduler.policy import TAIL_RATIO

PROBE_TOKENS = 128  # padded tokens of each timed batch (at least one row): ~50-100 ms on one 2020s core
ROUND_TO = 16


@dataclass(frozen=True)
class Calibration:
    lone_s: float  # one item of the shortest bucket, alone
    cost_per_token: dict[int, float]  # bucket bound T → seconds per padded token at T
    budgets: list[int]  # padded tokens per batch, one per bucket
    seconds: float  # what the calibration itself took


def token_budget(
    lone_s: float, cost_per_token: float, *, min_tokens: int, max_tokens: int, ratio: float = TAIL_RATIO
) -> int:
    """Padded tokens per batch such that the batch costs ≤ (ratio − 1) × ``lone_s``; rounded down
    to a multiple of 16, clamped to [min_tokens, max_tokens]. Non-increasing in the cost,
    non-decreasing in ``lone_s``."""
    if cost_per_token <= 0 or lone_s <= 0:
        return max(min_tokens, max_tokens)
    tokens = int((ratio - 1.0) * lone_s / cost_per_token) // ROUND_TO * ROUND_TO
    return max(min_tokens, min(max_tokens, tokens))


def best_time(fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The shortest of ``repeats`` calls of ``fn`` by ``clock`` (``time.thread_time``: the calling
    thread's CPU seconds, what a 1-thread engine costs whatever else the machine runs)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def calibrate(
    run: Callable[[list[Any], int], object],
    dummy: Callable[[int], Any],
    bounds: Sequence[int],
    *,
    max_tokens: int,
    lone_repeats: int = 3,
    repeats: int = 1,
) -> Calibration:
    """Time ``run`` (one worker's engine, already warmed up) on dummy items of every bucket bound."""
    t_start = time.perf_counter()
    shortest = bounds[0]
    lone_s = best_time(lambda: run([dummy(shortest)], shortest), lone_repeats)
    costs: dict[int, float] = {}
    for t in bounds:
        rows = max(1, PROBE_TOKENS // t)
        batch = [dummy(t)] * rows
        costs[t] = best_time(lambda b=batch, t=t: run(b, t), repeats) / (rows * t)  # type: ignore[misc]
    budgets = [token_budget(lone_s, costs[t], min_tokens=t, max_tokens=max(t, max_tokens)) for t in bounds]
    return Calibration(lone_s, costs, budgets, time.perf_counter() - t_start)
