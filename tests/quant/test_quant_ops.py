"""Quantization arithmetic: fast vs naive, per-channel error bounds, zero-point exactness."""

import numpy as np
import pytest

from openhood.engine.quant import ops


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_weight_quantization_matches_naive(rng):
    w = rng.standard_normal((9, 13)).astype(np.float32) * rng.uniform(0.01, 5, (9, 1)).astype(np.float32)
    q, s = ops.quantize_weight(w, axis=0)
    qn, sn = ops.quantize_weight_naive(w)
    np.testing.assert_array_equal(q, qn)
    np.testing.assert_array_equal(s, sn)


@pytest.mark.parametrize("qmax", [127, 63])
def test_weight_roundtrip_error_at_most_half_a_step_per_channel(rng, qmax):
    # Rows with very different magnitudes: a per-tensor scale would fail the small rows.
    w = rng.standard_normal((32, 64)).astype(np.float32) * np.logspace(-3, 2, 32, dtype=np.float32)[:, None]
    q, s = ops.quantize_weight(w, axis=0, qmax=qmax)
    err = np.abs(ops.dequantize_weight(q, s, axis=0) - w).max(axis=1)  # (32,)
    assert np.all(err <= s / 2 * (1 + 1e-5))
    assert q.min() >= -qmax and q.max() <= qmax
    # Each row's largest-magnitude weight uses the extreme code: the range is not wasted.
    assert np.all(np.abs(q).max(axis=1) == qmax)


def test_weight_quantization_along_other_axis(rng):
    w = rng.standard_normal((5, 7)).astype(np.float32)
    q, s = ops.quantize_weight(w, axis=1)
    qt, st = ops.quantize_weight(w.T, axis=0)
    np.testing.assert_array_equal(q, qt.T)
    np.testing.assert_array_equal(s, st)


def test_zero_channel_and_symmetry(rng):
    w = rng.standard_normal((3, 8)).astype(np.float32)
    w[1] = 0.0
    q, s = ops.quantize_weight(w)
    assert s[1] == 1.0 and np.all(q[1] == 0)
    qn, _ = ops.quantize_weight(-w)
    np.testing.assert_array_equal(qn, -q)  # narrow range: symmetric codes, zero point 0


@pytest.mark.parametrize("lo,hi", [(-1.0, 3.0), (-7.3, 0.2), (0.5, 9.0), (-4.0, -1.0), (-1e-3, 1e-3)])
def test_zero_is_exactly_representable(lo, hi):
    scale, zp = ops.activation_qparams(lo, hi)
    assert zp.dtype == np.uint8
    assert ops.quantize_activation(np.float32(0.0), scale, zp) == zp
    assert ops.dequantize_activation(np.array([zp]), scale, zp)[0] == 0.0
    # The range is widened to include 0 and still covered by the 256 codes.
    assert ops.dequantize_activation(np.array([0]), scale, zp)[0] <= min(lo, 0.0) + scale / 2
    assert ops.dequantize_activation(np.array([255]), scale, zp)[0] >= max(hi, 0.0) - scale / 2


def test_activation_qparams_example_from_docstring():
    scale, zp = ops.activation_qparams(-1.0, 3.0)
    assert np.isclose(scale, 4 / 255) and zp == 64


def test_activation_roundtrip_and_clipping(rng):
    x = rng.uniform(-2.0, 6.0, 1000).astype(np.float32)
    scale, zp = ops.activation_qparams(-2.0, 6.0)
    q = ops.quantize_activation(x, scale, zp)
    np.testing.assert_array_equal(q, ops.quantize_activation_naive(x, scale, zp))
    assert np.abs(ops.dequantize_activation(q, scale, zp) - x).max() <= scale / 2 * (1 + 1e-4)
    out = ops.quantize_activation(np.array([-100.0, 100.0], dtype=np.float32), scale, zp)
    np.testing.assert_array_equal(out, [0, 255])  # out-of-range values clip to the ends


def test_all_zero_tensor_roundtrips():
    scale, zp = ops.dynamic_qparams(np.zeros((4, 4), dtype=np.float32))
    assert np.all(ops.fake_quantize_activation(np.zeros(3, dtype=np.float32), scale, zp) == 0.0)


def test_non_finite_range_is_refused():
    with pytest.raises(ValueError, match="finite"):
        ops.activation_qparams(-np.inf, 1.0)


def test_int8_matmul_matches_naive_and_float(rng):
    x = rng.standard_normal((4, 24)).astype(np.float32)
    w = rng.standard_normal((6, 24)).astype(np.float32)
    wq, ws = ops.quantize_weight(w)
    xs, xzp = ops.dynamic_qparams(x)
    xq = ops.quantize_activation(x, xs, xzp)
    fast = ops.int8_matmul(xq, xs, xzp, wq, ws)
    np.testing.assert_allclose(fast, ops.int8_matmul_naive(xq, xs, xzp, wq, ws), rtol=1e-6, atol=1e-6)
    # Against fp32: the error is bounded by the two rounding errors propagated through the dot.
    exact = x @ w.T
    bound = np.abs(x).sum(1)[:, None] * ws[None, :] / 2 + xs / 2 * np.abs(w).sum(1)[None, :] + 24 * xs * ws / 4
    assert np.all(np.abs(fast - exact) <= bound * 1.01)
