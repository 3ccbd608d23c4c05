"""engine.kernels.pointwise_simd: the 1×1-conv GEMM with bias + residual + clip in its store, against
its float64 reference, and the convs that use it against sgemm + the separate epilogue."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.graph import conv
from openhood.engine.kernels import pointwise_simd
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter

pw = pointwise_simd.kernel()  # the native @pw: pw(*pointwise_simd.pointwise_args(...))
pytestmark = pytest.mark.skipif(pw is None, reason="no AVX2/FMA: sgemm serves")


def rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize(
    "m,k,n", [(1, 8, 16), (5, 3, 32), (6, 24, 48), (49, 1152, 192), (97, 96, 64), (200, 40, 16), (13, 320, 1280)]
)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("bounds", [(-np.inf, np.inf), (0.0, 6.0)])
def test_pointwise_matches_reference(m, k, n, residual, bounds):
    rng = np.random.default_rng(m * k + n)
    lin = Linear(rand(rng, k, n), rand(rng, n))
    x = rand(rng, m, k)
    r = rand(rng, m, n) if residual else None
    out = np.full((m, n), np.nan, np.float32)
    pw(*pointwise_simd.pointwise_args(x, pointwise_simd.panels(lin), lin.bias, out, *bounds, r))
    ref = pointwise_simd.pointwise_reference(x, lin.weight, lin.bias, *bounds, r)
    assert np.max(np.abs(out - ref)) < 2e-5 * np.sqrt(k) * max(1.0, float(np.abs(ref).max()))
    if bounds[0] == 0.0:
        assert out.min() >= 0.0 and out.max() <= 6.0


def test_pointwise_column_slice_and_strided_rows():
    """Output columns [c0, c0 + 16·j) of the packed weight, from and into row-strided views."""
    rng = np.random.default_rng(3)
    k, n, m = 24, 64, 19
    lin = Linear(rand(rng, k, n), rand(rng, n))
    big = rand(rng, m, 40)
    x = big[:, 5 : 5 + k]  # rows 40 floats apart
    dst = np.zeros((m, 80), np.float32)
    out = dst[:, 8:40]  # 32 columns, rows 80 floats apart
    pw(*pointwise_simd.pointwise_args(x, pointwise_simd.panels(lin), lin.bias, out, 0.0, 6.0, None, 16))
    ref = pointwise_simd.pointwise_reference(x, lin.weight[:, 16:48], lin.bias[16:48], 0.0, 6.0)
    assert np.max(np.abs(out - ref)) < 1e-4
    assert not dst[:, :8].any() and not dst[:, 40:].any()  # nothing written outside the view


def test_panels_are_packed_once_per_layer():
    rng = np.random.default_rng(4)
    lin = Linear(rand(rng, 8, 32), None)
    assert pointwise_simd.panels(lin) is pointwise_simd.panels(lin)
    assert pointwise_simd.suits(lin) and not pointwise_simd.suits(Linear(rand(rng, 8, 24), None))


@pytest.fixture(scope="module")
def splitter():
    s = RowSplitter(2)
    yield s
    s.close()


@pytest.mark.parametrize("residual", [False, True])
def test_conv2d_pointwise_equals_sgemm_path(splitter, monkeypatch, residual):
    rng = np.random.default_rng(5)
    x = np.abs(rand(rng, 2, 9, 7, 40))
    lin = Linear(rand(rng, 40, 48), rand(rng, 48))
    res = rand(rng, 2, 9, 7, 48) if residual else None
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)  # blocks split over both threads
    fast = conv.conv2d(x, lin, 1, 1, splitter, "relu6", res)
    monkeypatch.setattr(conv, "SIMD_POINTWISE", False)
    gemm = conv.conv2d(x, lin, 1, 1, splitter, "relu6", res)
    ref = conv.relu6_naive(conv.conv2d_naive(x, lin.weight[None, None], lin.bias, 1) + (0 if res is None else res))
    assert np.max(np.abs(fast - ref)) < 1e-4 and np.max(np.abs(fast - gemm)) < 1e-5


@pytest.mark.parametrize("tile_bytes", [1 << 30, 32768])  # whole images (channels split over threads), bands
def test_mbconv_pointwise_equals_sgemm(splitter, monkeypatch, tile_bytes):
    """Expand (96 → 192) and project (192 → 32, + residual) through pointwise_simd against sgemm."""
    monkeypatch.setattr(conv, "MBCONV_TILE_BYTES", tile_bytes)
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)
    rng = np.random.default_rng(6)
    x = np.abs(rand(rng, 2, 9, 9, 32))
    we, be, dw, bd = rand(rng, 32, 192) * 0.3, rand(rng, 192), rand(rng, 3, 3, 192), rand(rng, 192)
    wp, bp, res = rand(rng, 192, 32) * 0.2, rand(rng, 32), rand(rng, 2, 9, 9, 32)
    ref = conv.mbconv_naive(x, we, be, dw, bd, 1, wp, bp, res)
    fast = conv.mbconv(x, Linear(we, be), dw, bd, 1, Linear(wp, bp), splitter, res)
    monkeypatch.setattr(conv, "SIMD_POINTWISE", False)
    gemm = conv.mbconv(x, Linear(we, be), dw, bd, 1, Linear(wp, bp), splitter, res)
    assert np.max(np.abs(fast - ref)) < 1e-4 and np.max(np.abs(fast - gemm)) < 1e-5


def test_pointwise_rows_at_scatters_rows_into_a_padded_buffer():
    """Each product row lands at its table offset; the pad around the rows is never written."""
    rng = np.random.default_rng(8)
    h, w, c, pad = 5, 7, 32, 2
    lin = Linear(rand(rng, 24, c), rand(rng, c))
    x = rand(rng, h * w, 24)
    buf = np.full((h + 2 * pad, w + 2 * pad, c), -7.0, np.float32)
    rows, cols = np.meshgrid(np.arange(pad, pad + h), np.arange(pad, pad + w), indexing="ij")
    at = ((rows * (w + 2 * pad) + cols) * c).reshape(-1).astype(np.int64)
    pw(*pointwise_simd.pointwise_args(x, pointwise_simd.panels(lin), lin.bias, buf[0], 0.0, 6.0, None, 0, at))
    ref = pointwise_simd.pointwise_reference(x, lin.weight, lin.bias, 0.0, 6.0).reshape(h, w, c)
    assert np.max(np.abs(buf[pad : pad + h, pad : pad + w] - ref)) < 1e-4
    inside = np.zeros(buf.shape[:2], bool)
    inside[pad : pad + h, pad : pad + w] = True
    assert (buf[~inside] == -7.0).all()
    with pytest.raises(ValueError):
        pointwise_simd.pointwise_args(x, pointwise_simd.panels(lin), lin.bias, buf[0], 0.0, 6.0, None, 0, at[:-1])


@pytest.mark.parametrize("h,k,s", [(9, 3, 1), (10, 5, 2), (7, 5, 1), (12, 3, 2)])
@pytest.mark.parametrize("tile_bytes", [1 << 30, 1 << 17, 16384])  # all images (channels split), 2 images, bands
def test_mbconv_expand_into_padded_band(splitter, monkeypatch, h, k, s, tile_bytes):
    """The expand written straight into a zero-padded band (every depthwise pixel interior)
    against the plain tile + border path and the three naive convs; the scratch is first filled
    with garbage by another shape, so stale pad values would show."""
    monkeypatch.setattr(conv, "MBCONV_TILE_BYTES", tile_bytes)
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)
    rng = np.random.default_rng(h * k + s)
    cin, hidden, cout = 24, 64, 16
    x = np.abs(rand(rng, 3, h, h + 3, cin))
    we, be = rand(rng, cin, hidden) * 0.3, rand(rng, hidden) + 1.0  # ReLU6(bias) > 0: a pad left unzeroed shows
    dw, bd, wp, bp = rand(rng, k, k, hidden), rand(rng, hidden), rand(rng, hidden, cout) * 0.2, rand(rng, cout)
    ref = conv.mbconv_naive(x, we, be, dw, bd, s, wp, bp, None)
    junk = np.full((3, 2 * h, 2 * h, cin), 5.0, np.float32)
    conv.mbconv(junk, Linear(we, be), dw, bd, s, Linear(wp, bp), splitter)  # dirties the scratch
    assert conv.EXPAND_INTO_PADDED
    padded = conv.mbconv(x, Linear(we, be), dw, bd, s, Linear(wp, bp), splitter)
    monkeypatch.setattr(conv, "EXPAND_INTO_PADDED", False)
    plain = conv.mbconv(x, Linear(we, be), dw, bd, s, Linear(wp, bp), splitter)
    assert np.max(np.abs(padded - ref)) < 1e-4 and np.max(np.abs(padded - plain)) < 1e-5
    monkeypatch.setattr(conv, "EXPAND_INTO_PADDED", True)  # the same geometry again after another one
    conv.mbconv(junk, Linear(we, be), dw, bd, s, Linear(wp, bp), splitter)
    again = conv.mbconv(x, Linear(we, be), dw, bd, s, Linear(wp, bp), splitter)
    assert np.array_equal(again, padded)


def test_pointwise_partial_product_over_input_rows():
    """k0: x (M, K') against weight rows [k0, k0 + K') only, the channel-split partial sums."""
    rng = np.random.default_rng(9)
    lin = Linear(rand(rng, 96, 48), rand(rng, 48))
    x = rand(rng, 30, 32)
    zero = np.zeros(48, np.float32)
    out = np.empty((30, 48), np.float32)
    pw(*pointwise_simd.pointwise_args(x, pointwise_simd.panels(lin), zero, out, -np.inf, np.inf, None, 0, None, 64))
    ref = pointwise_simd.pointwise_reference(x, lin.weight[64:96], zero, -np.inf, np.inf)
    assert np.max(np.abs(out - ref)) < 1e-4
