"""The token budget, derived at start-up from the engine's measured speed on this machine.

A batch of ``max_batch_tokens`` padded tokens is what a short request may find in front of it
when every worker is busy, so the budget decides the tail: a short request waits up to one
batch, then runs itself. For its latency to stay within ``TAIL_RATIO`` × a lone short
request's (the SLO: P99 ≤ 3 × P50 per length bucket), one batch may cost at most
(``TAIL_RATIO`` − 1) × the engine's time for one item of the shortest bucket. The calibration
measures that time (best of ``lone_repeats``: a short call is cheap to repeat) and the cost per
token of every bucket (one batch of ~``PROBE_TOKENS`` padded tokens each, after the warm-up),
and the budget is the most tokens whose batch stays within
that time in the most expensive bucket per token.

The trade-off: a measurement of a few hundred milliseconds at start-up, on whatever else the
machine is doing at that moment (a loaded start gives a larger per-token cost and so a smaller,
safer budget); bounded below by the largest bucket (one item of it must fit) and above by
``MAX_BUDGET``; ``openhood serve --max-batch-tokens`` skips it.

>>> token_budget(0.010, {48: 2e-4, 256: 4e-4}, min_tokens=256)
256
>>> token_budget(0.100, {48: 2e-4, 256: 4e-4}, min_tokens=256)
496
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openhood.scheduler.policy import TAIL_RATIO

PROBE_TOKENS = 128  # padded tokens of each timed batch (at least one row): ~50-100 ms on one 2020s core
MAX_BUDGET = 8192  # beyond this, batches are multi-second on any CPU this serves
ROUND_TO = 16


@dataclass(frozen=True)
class Calibration:
    lone_s: float  # one item of the shortest bucket, alone
    cost_per_token: dict[int, float]  # bucket bound T → seconds per padded token at T
    seconds: float  # what the calibration itself took
    budget: int


def token_budget(lone_s: float, cost_per_token: Mapping[int, float], *, min_tokens: int,
                 max_tokens: int = MAX_BUDGET, ratio: float = TAIL_RATIO) -> int:
    """Padded tokens per batch such that the batch costs ≤ (ratio − 1) × ``lone_s`` in the most
    expensive bucket; rounded down to a multiple of 16, clamped to [min_tokens, max_tokens].
    Non-increasing in every cost, non-decreasing in ``lone_s``."""
    worst = max(cost_per_token.values())
    if worst <= 0 or lone_s <= 0:
        return max_tokens
    tokens = int((ratio - 1.0) * lone_s / worst) // ROUND_TO * ROUND_TO
    return max(min_tokens, min(max_tokens, tokens))


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(run: Callable[[list[Any], int], object], dummy: Callable[[int], Any], bounds: Sequence[int], *,
              lone_repeats: int = 3, repeats: int = 1, max_tokens: int = MAX_BUDGET) -> Calibration:
    """Time ``run`` (one worker's engine, already warmed up) on dummy items of every bucket bound."""
    t_start = time.perf_counter()
    shortest = bounds[0]
    lone_s = _best_time(lambda: run([dummy(shortest)], shortest), lone_repeats)
    costs: dict[int, float] = {}
    for t in bounds:
        rows = max(1, PROBE_TOKENS // t)
        batch = [dummy(t)] * rows
        costs[t] = _best_time(lambda b=batch, t=t: run(b, t), repeats) / (rows * t)  # type: ignore[misc]
    budget = token_budget(lone_s, costs, min_tokens=max(bounds), max_tokens=max_tokens)
    return Calibration(lone_s, costs, time.perf_counter() - t_start, budget)
