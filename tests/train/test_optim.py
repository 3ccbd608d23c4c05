"""Flat-buffer SGD/Adam equal their per-tensor naive references over several steps; schedules."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.train.model import MLP
from openhood.train.optim import adam_step_naive, lr_at, make_optimizer, sgd_step_naive


def tensors(model: MLP) -> list[np.ndarray]:
    return [lin.weight for lin in model.linears] + [lin.bias for lin in model.linears]


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_fast_optimizer_matches_naive(name):
    rng = np.random.default_rng(5)
    model = MLP((4, 6, 3), dtype=np.float64, seed=1)
    params = [t.copy() for t in tensors(model)]
    decays = [0.05] * len(model.linears) + [0.0] * len(model.linears)  # weights only
    opt = make_optimizer(name, model.params, model.grads, model.n_decay, momentum=0.9, weight_decay=0.05)
    bufs, ms, vs = [None] * len(params), [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    for t in range(1, 5):
        model.grads[...] = rng.standard_normal(model.grads.size)
        grads = [
            g.copy() for g in [lin.grad_weight for lin in model.linears] + [lin.grad_bias for lin in model.linears]
        ]
        lr = 0.05 / t
        opt.step(lr)
        if name == "sgd":
            sgd_step_naive(params, grads, bufs, lr, 0.9, decays)
        else:
            adam_step_naive(params, grads, ms, vs, t, lr, decays)
        for fast, naive in zip(tensors(model), params, strict=False):
            np.testing.assert_allclose(fast, naive, rtol=1e-12, atol=1e-14)


def test_schedules():
    assert lr_at(0, 100, 0.1, "constant") == lr_at(99, 100, 0.1, "constant") == 0.1
    assert lr_at(0, 100, 0.1, "cosine") == 0.1 and lr_at(50, 100, 0.1, "cosine") == pytest.approx(0.05)
    assert lr_at(99, 100, 0.1, "cosine") < 1e-3
    assert [lr_at(s, 100, 1.0, "step") for s in (0, 49, 50, 75)] == pytest.approx([1.0, 1.0, 0.1, 0.01])
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_at(0, 1, 0.1, "linear-warmup")
