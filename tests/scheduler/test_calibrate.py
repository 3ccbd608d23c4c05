"""Start-up token budgets: the formula is monotone and bounded; calibrate times a fake engine."""

import time

import pytest

from openhood.scheduler.calibrate import PROBE_TOKENS, calibrate, token_budget
from openhood.scheduler.policy import TAIL_RATIO


@pytest.mark.parametrize("lone_s", [1e-4, 0.003, 0.02, 0.5])
def test_budget_is_monotone_in_the_cost_and_bounded(lone_s):
    costs = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
    budgets = [token_budget(lone_s, c, min_tokens=48, max_tokens=512) for c in costs]
    assert budgets == sorted(budgets, reverse=True)  # a slower engine never gets a bigger budget
    assert all(48 <= b <= 512 for b in budgets)
    faster = [token_budget(lone_s * 2, c, min_tokens=48, max_tokens=512) for c in costs]
    assert all(f >= b for f, b in zip(faster, budgets, strict=True))


def test_a_batch_within_its_budget_costs_at_most_the_tail_ratio_minus_one_lone_items():
    lone, cost = 0.010, 2e-5  # 10 ms alone; 20 us per padded token
    b = token_budget(lone, cost, min_tokens=48, max_tokens=8192)
    assert b % 16 == 0 and b * cost <= (TAIL_RATIO - 1) * lone < (b + 16) * cost


def test_calibrate_times_every_bucket_on_a_fake_engine():
    calls = []

    def run(payloads, t):  # 1 ms per call + 20 us per padded token
        calls.append((len(payloads), t))
        time.sleep(0.001 + 2e-5 * len(payloads) * t)

    bounds = (48, 80, 160, 256)
    cal = calibrate(run, lambda n: list(range(n)), bounds, max_tokens=512, lone_repeats=3, repeats=2)
    assert calls[:3] == [(1, 48)] * 3 and len(calls) == 3 + 2 * 4  # lone best of 3, one batch per bucket best of 2
    assert all(rows * t <= PROBE_TOKENS or rows == 1 for rows, t in calls)
    assert set(cal.cost_per_token) == set(bounds)
    assert all(1.5e-5 < c < 1e-3 for c in cal.cost_per_token.values())  # sleep only overshoots
    assert all(t <= b <= 512 for t, b in zip(bounds, cal.budgets, strict=True))  # one item fits; capped
    assert cal.budgets == [
        token_budget(cal.lone_s, cal.cost_per_token[t], min_tokens=t, max_tokens=512) for t in bounds
    ]
    assert cal.seconds < 1.0
