"""Backpropagation checked two ways: finite differences in float64, and each fast kernel vs its naive form."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.train import layers as L
from openhood.train.model import MLP

H = 1e-6  # central differences: truncation O(h²) ~ 1e-12, rounding ~ 1e-16 / h ~ 1e-10


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a) + np.abs(b), 1e-8)))


def loss_at(model: MLP, x, y) -> float:
    return model.loss.forward(model.logits(x), y)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("sizes", [(5, 7, 3), (5, 7, 6, 4)])
def test_finite_differences_every_parameter(sizes, smoothing):
    rng = np.random.default_rng(7)
    model = MLP(sizes, dtype=np.float64, seed=3)
    model.loss = L.SoftmaxCrossEntropy(smoothing)  # label smoothing: forward and backward must agree too
    model.params[model.n_decay :] = rng.standard_normal(model.params.size - model.n_decay) * 0.1  # non-zero biases
    x = rng.standard_normal((9, sizes[0]))
    y = rng.integers(0, sizes[-1], 9)
    model.loss_and_grad(x, y)
    analytic = model.grads.copy()
    numeric = np.empty_like(analytic)
    for i in range(model.params.size):  # every weight and bias of every layer
        keep = model.params[i]
        model.params[i] = keep + H
        up = loss_at(model, x, y)
        model.params[i] = keep - H
        down = loss_at(model, x, y)
        model.params[i] = keep
        numeric[i] = (up - down) / (2 * H)
    assert rel_error(analytic, numeric) < 1e-6
    # the check can fail: a gradient off by one element's sign is caught
    broken = analytic.copy()
    broken[0] = -broken[0] if broken[0] else 1.0
    assert rel_error(broken, numeric) > 1e-2


def test_linear_fast_matches_naive():
    rng = np.random.default_rng(0)
    x, w, b, dy = (
        rng.standard_normal((6, 4)),
        rng.standard_normal((4, 3)),
        rng.standard_normal(3),
        rng.standard_normal((6, 3)),
    )
    gw, gb = np.zeros_like(w), np.zeros_like(b)
    lin = L.Linear(w, b, gw, gb)
    np.testing.assert_allclose(lin.forward(x), L.linear_forward_naive(x, w, b), rtol=1e-12, atol=1e-12)
    dx = lin.backward(dy)
    nw, nb, nx = L.linear_backward_naive(x, w, dy)
    for fast, naive in ((gw, nw), (gb, nb), (dx, nx)):
        np.testing.assert_allclose(fast, naive, rtol=1e-12, atol=1e-12)


def test_relu_fast_matches_naive():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 8))
    x[0, 0] = 0.0
    dy = rng.standard_normal((5, 8))
    relu = L.ReLU()
    y = relu.forward(x.copy())
    np.testing.assert_array_equal(y, L.relu_forward_naive(x))
    np.testing.assert_array_equal(relu.backward(dy.copy()), L.relu_backward_naive(x, dy))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_fast_matches_naive(dtype, smoothing):
    rng = np.random.default_rng(2)
    z = (rng.standard_normal((7, 5)) * 30).astype(dtype)  # large logits: the max shift matters
    y = rng.integers(0, 5, 7)
    loss, grad = L.softmax_cross_entropy_naive(z.astype(np.float64), y, smoothing)
    ce = L.SoftmaxCrossEntropy(smoothing)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    assert abs(ce.forward(z.copy(), y) - loss) <= tol * max(1.0, abs(loss))
    np.testing.assert_allclose(ce.backward(), grad, atol=tol)


def test_label_smoothing_loss_is_the_mixture_and_checked():
    """ε-smoothed loss = (1 - ε) CE(y) + ε × mean over classes of CE(k); ε outside [0, 1) is refused."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((6, 4))
    y = rng.integers(0, 4, 6)
    plain = L.SoftmaxCrossEntropy().forward(z.copy(), y)
    every = [L.SoftmaxCrossEntropy().forward(z.copy(), np.full(6, k)) for k in range(4)]
    smoothed = L.SoftmaxCrossEntropy(0.3).forward(z.copy(), y)
    assert abs(smoothed - (0.7 * plain + 0.3 * np.mean(every))) < 1e-12
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="label smoothing"):
            L.SoftmaxCrossEntropy(bad)
