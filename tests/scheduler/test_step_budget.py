"""StepBudget: the fit recovers a linear step time, and the prompt tokens it allows keep a step
within ``stretch`` decode-only steps, clamped, with the documented fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.scheduler.step_budget import MIN_POINTS, MIN_PREFILL, StepBudget

A, B = 0.040, 0.0025  # 40 ms per step + 2.5 ms per token: SmolLM2 fp32 on 2 cores, roughly


def observed(budget: StepBudget, tokens, noise: float = 0.0, seed: int = 0) -> StepBudget:
    rng = np.random.default_rng(seed)
    for n in tokens:
        budget.observe(int(n), A + B * n + noise * rng.standard_normal())
    return budget


def test_fit_recovers_a_linear_step_time_and_the_budget_follows_the_formula():
    b = observed(StepBudget(chunk=128, stretch=2.0), [16, 16, 48, 16, 80, 16, 16, 30, 16, 112])
    a, slope = b.fit()
    assert a == pytest.approx(A) and slope == pytest.approx(B)
    # 2 × t(16) = 160 ms; 160 − 40 = 120 ms of tokens = 48 tokens, 16 of them decode rows → 32.
    assert b.prefill_tokens(16) == 32
    assert A + B * (16 + b.prefill_tokens(16)) <= 2.0 * (A + B * 16) + 1e-12
    assert b.prefill_tokens(4) == int((2 * (A + B * 4) - A) / B) - 4  # 20: the fixed cost buys room
    # 2 decoding, 14 reading prompts: measured against the batch of 16, not the 2 (a ramp).
    assert b.prefill_tokens(2, running=16) == 48 - 2 and b.prefill_tokens(16, running=16) == 32
    assert StepBudget(chunk=128, stretch=3.0).prefill_tokens(16) == 128  # no steps seen yet
    with_noise = observed(StepBudget(chunk=128, stretch=2.0), [16, 48, 16, 80, 16, 112] * 20, noise=0.002)
    assert abs(with_noise.prefill_tokens(16) - 32) <= 4


def test_clamps_and_fallbacks():
    b = observed(StepBudget(chunk=24, stretch=2.0), [16, 48, 16, 80, 16, 112, 16, 16])
    assert b.prefill_tokens(16) == 24  # the chunk caps it
    assert b.prefill_tokens(0) == 24  # nobody decoding: the whole chunk
    tight = observed(StepBudget(chunk=128, stretch=1.05), [16, 48, 16, 80, 16, 112, 16, 16])
    assert tight.prefill_tokens(16) == MIN_PREFILL  # a prompt always progresses
    assert observed(StepBudget(chunk=128, stretch=0), [16, 48] * 8).prefill_tokens(16) == 128  # off
    assert StepBudget(chunk=128, stretch=2.0).fit() is None
    few = observed(StepBudget(chunk=128, stretch=2.0), [128] + [16, 48] * ((MIN_POINTS - 2) // 2))  # spread, few
    assert few.fit()[0] == 0.0 and few.prefill_tokens(16) < 32  # a = 0 until MIN_POINTS: the cautious side
    flat = observed(StepBudget(chunk=128, stretch=2.0), [16] * MIN_POINTS)  # no spread: a = 0
    assert flat.fit() == (0.0, pytest.approx(A / 16 + B))
    assert flat.prefill_tokens(16) == 16  # stretch × r − d
    window = observed(StepBudget(chunk=128, stretch=2.0, window=8), [16, 48, 16, 80] * 4)
    assert len(window._tokens) == 8


@pytest.mark.parametrize("chunk,stretch", [(0, 2.0), (8, 0.5), (8, -1.0)])
def test_bad_arguments_raise(chunk, stretch):
    with pytest.raises(ValueError):
        StepBudget(chunk, stretch)
