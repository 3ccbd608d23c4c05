"""Each fast float32 kernel against its naive float64 reference (engine/ops.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from openhood.engine import ops
from openhood.engine.linear import Linear
from openhood.engine.parallel import RowSplitter


@pytest.fixture(scope="module", params=[1, 2], ids=["1thread", "2threads"])
def splitter(request):
    sp = RowSplitter(request.param)
    yield sp
    sp.close()


def rand(shape, scale=1.0, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def test_erf_fast_matches_math_erf():
    x = np.concatenate([np.linspace(-6, 6, 20001, dtype=np.float32), rand(5000, 2.0), [0.0, -0.0, 1e-8, 30.0, -30.0]]).astype(np.float32)
    got = ops.erf_fast(x)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - ops.erf_naive(x))) < 4e-7  # A&S 1.5e-7 + float32 rounding
    assert ops.erf_naive(np.array([0.5]))[0] == pytest.approx(math.erf(0.5))


@pytest.mark.parametrize("shape", [(3, 7), (300, 1536)])  # below and above the parallel threshold
def test_gelu_fast_matches_exact_erf_gelu(splitter, shape):
    x = rand(shape, 3.0)
    bias = rand(shape[1], 0.5, seed=1)
    y = ops.gelu_(x.copy(), splitter, bias=bias)
    ref = ops.gelu_naive(x.astype(np.float64) + bias)
    assert np.max(np.abs(y - ref)) < 2e-6
    # exact-erf GELU, not the tanh approximation: they differ by ~1e-4 near |x| = 2
    assert ops.gelu_naive(np.array([2.0]))[0] == pytest.approx(1.9544997361, abs=1e-9)


def test_relu_and_softmax(splitter):
    x = rand((200, 500), 4.0)
    assert np.array_equal(ops.relu_(x.copy(), splitter), ops.relu_naive(x).astype(np.float32))
    sm = ops.softmax_(x.copy(), splitter)
    assert np.max(np.abs(sm - ops.softmax_naive(x))) < 1e-6
    assert np.allclose(sm.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("rows", [5, 700])
def test_layernorm_with_bias_and_residual(splitter, rows):
    c = 384
    x, res = rand((rows, c), 2.0, 1), rand((rows, c), 1.0, 2)
    gamma, beta, bias = rand(c, 1.0, 3), rand(c, 1.0, 4), rand(c, 1.0, 5)
    y = ops.layernorm_(x.copy(), gamma, beta, 1e-12, splitter, residual=res, bias=bias)
    ref = ops.layernorm_naive(x.astype(np.float64) + bias + res, gamma, beta, 1e-12)
    assert np.max(np.abs(y - ref)) < 2e-5


def test_linear_matches_reference():
    x, w, b = rand((33, 384)), rand((384, 1536), 0.05, 1), rand(1536, 0.1, 2)
    lin = Linear(w, b)
    assert np.max(np.abs(lin.forward(x) - ops.linear_naive(x, w, b))) < 1e-5
    torch_layout = Linear.from_torch_layout(w.T.copy(), b)
    assert np.array_equal(torch_layout.weight, lin.weight)
    assert lin.flops(33) == 2 * 33 * 384 * 1536
    with pytest.raises(ValueError, match="bias shape"):
        Linear(w, b[:-1])


@pytest.mark.parametrize("b,t", [(1, 5), (6, 40)])
def test_attention_with_padding_matches_reference(splitter, b, t):
    heads, c = 12, 384
    qkv = rand((b, t, 3 * c), 1.0, 7)
    q, k, v = qkv[:, :, :c], qkv[:, :, c : 2 * c], qkv[:, :, 2 * c :]  # strided views, like the engine
    lengths = np.linspace(1, t, b).astype(int)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    out = np.empty((b, t, c), np.float32)
    ops.attention_(q, k, v, ops.attention_mask_bias(mask), heads, 1 / math.sqrt(c // heads), out, splitter)
    ref = ops.attention_naive(q, k, v, mask, heads, 1 / math.sqrt(c // heads))
    assert np.max(np.abs(out - ref)) < 1e-5
    # no padding → the bias may be skipped entirely
    out2 = np.empty_like(out)
    ops.attention_(q, k, v, None, heads, 1 / math.sqrt(c // heads), out2, splitter)
    ref2 = ops.attention_naive(q, k, v, np.ones((b, t)), heads, 1 / math.sqrt(c // heads))
    assert np.max(np.abs(out2 - ref2)) < 1e-5


def test_mean_pool_and_normalize():
    h = rand((4, 9, 384))
    mask = (np.arange(9)[None, :] < np.array([9, 1, 5, 3])[:, None]).astype(np.int64)
    pooled = ops.mean_pool(h, mask)
    assert np.max(np.abs(pooled - ops.mean_pool_naive(h, mask))) < 1e-6
    normed = ops.l2_normalize(pooled)
    assert np.max(np.abs(normed - ops.l2_normalize_naive(pooled))) < 1e-6
    assert np.allclose(np.linalg.norm(normed, axis=1), 1.0, atol=1e-6)
    assert np.all(ops.l2_normalize(np.zeros((1, 4), np.float32)) == 0)  # no NaN on a zero vector
