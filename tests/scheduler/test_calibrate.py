"""The start-up token budget: the formula is monotone and bounded; calibrate times a fake engine."""

import itertools
import time

import pytest

from openhood.scheduler.calibrate import MAX_BUDGET, PROBE_TOKENS, calibrate, token_budget
from openhood.scheduler.policy import TAIL_RATIO


@pytest.mark.parametrize("lone_s", [1e-4, 0.003, 0.02, 0.5])
def test_budget_is_monotone_in_costs_and_bounded(lone_s):
    costs = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
    budgets = [token_budget(lone_s, {48: c / 2, 256: c}, min_tokens=256) for c in costs]
    assert budgets == sorted(budgets, reverse=True)  # a slower engine never gets a bigger budget
    assert all(256 <= b <= MAX_BUDGET and b % 16 == 0 for b in budgets)
    faster = [token_budget(lone_s * 2, {48: c / 2, 256: c}, min_tokens=256) for c in costs]
    assert all(f >= b for f, b in zip(faster, budgets, strict=True))


def test_budget_keeps_one_batch_within_the_tail_ratio():
    lone, cost = 0.010, 2e-5  # 10 ms alone; 20 us per padded token in the worst bucket
    b = token_budget(lone, {48: 1e-5, 256: cost}, min_tokens=256)
    assert b * cost <= (TAIL_RATIO - 1) * lone < (b + 16) * cost


def test_calibrate_times_every_bucket_on_a_fake_engine():
    # A fake engine costing 5 us per padded token (quadratic-ish cost ignored) plus 1 ms per call.
    calls = []

    def run(payloads, t):
        calls.append((len(payloads), t))
        time.sleep(0.001 + 5e-6 * len(payloads) * t)

    cal = calibrate(run, lambda n: list(range(n)), (48, 80, 160, 256), lone_repeats=3, repeats=2)
    assert {t for _, t in calls} == {48, 80, 160, 256}
    assert all(rows * t <= PROBE_TOKENS or rows == 1 for rows, t in calls)
    assert set(cal.cost_per_token) == {48, 80, 160, 256}
    assert all(4e-6 < c < 5e-5 for c in cal.cost_per_token.values())
    assert 256 <= cal.budget <= MAX_BUDGET and cal.seconds < 1.0
    assert cal.budget == token_budget(cal.lone_s, cal.cost_per_token, min_tokens=256)
    assert len(calls) == 3 + 2 * 4  # the lone item best of 3, then one batch per bucket best of 2
    assert list(itertools.islice(calls, 3)) == [(1, 48)] * 3
