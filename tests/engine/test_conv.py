"""CNN ops: each fast kernel against its naive float64 reference, and BatchNorm folding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from openhood.engine.graph import conv
from openhood.engine.kernels import depthwise_simd
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter


@pytest.fixture(scope="module")
def splitter():
    s = RowSplitter(2)
    yield s
    s.close()


def rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def test_same_padding_is_tensorflows():
    # out = ceil(in / stride); the odd pixel goes after (bottom/right)
    assert conv.same_padding(224, 3, 2) == (0, 1)
    assert conv.same_padding(112, 3, 1) == (1, 1)
    assert conv.same_padding(56, 5, 2) == (1, 2)
    assert conv.same_padding(7, 5, 1) == (2, 2)
    assert conv.same_padding(15, 3, 2) == (1, 1)  # odd input: symmetric


@pytest.mark.parametrize(
    "h,w,cin,cout,k,s",
    [(9, 7, 3, 5, 3, 2), (8, 8, 4, 6, 3, 1), (5, 6, 7, 4, 1, 1), (10, 11, 2, 3, 5, 2), (6, 6, 3, 4, 1, 2)],
)
@pytest.mark.parametrize("activation", [None, "relu6"])
def test_conv2d_matches_reference(splitter, h, w, cin, cout, k, s, activation):
    rng = np.random.default_rng(h * 100 + k)
    x, weight, bias = rand(rng, 2, h, w, cin) * 3, rand(rng, k, k, cin, cout), rand(rng, cout)
    ref = conv.conv2d_naive(x, weight, bias, s)
    if activation:
        ref = conv.relu6_naive(ref)
    got = conv.conv2d(x, Linear(weight.reshape(-1, cout), bias), k, s, splitter, activation)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.max(np.abs(got - ref)) < 1e-4


def test_conv2d_and_depthwise_split_over_threads(splitter, monkeypatch):
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)  # every call splits its rows over both threads
    rng = np.random.default_rng(1)
    x, weight, bias, res = rand(rng, 4, 32, 32, 24), rand(rng, 1, 1, 24, 40), rand(rng, 40), rand(rng, 4, 32, 32, 40)
    ref = conv.conv2d_naive(x, weight, bias, 1) + res
    got = conv.conv2d(x, Linear(weight.reshape(24, 40), bias), 1, 1, splitter, None, res)
    assert np.max(np.abs(got - ref)) < 1e-4
    stem = rand(rng, 3, 3, 24, 8)
    got = conv.conv2d(x, Linear(stem.reshape(-1, 8)), 3, 2, splitter, "relu6")
    assert np.max(np.abs(got - conv.relu6_naive(conv.conv2d_naive(x, stem, None, 2)))) < 1e-4
    dw = rand(rng, 5, 5, 24)
    assert (
        np.max(np.abs(conv.depthwise_conv(x, dw, None, 1, splitter) - conv.depthwise_conv_naive(x, dw, None, 1))) < 1e-4
    )


@pytest.mark.parametrize("residual", [False, True])
def test_pointwise_conv_with_few_rows_splits_its_output_channels(splitter, monkeypatch, residual):
    # the head at batch 1: 7 output rows are fewer than one row block, so the two threads take
    # 64 output channels each (each a slice of the packed panels, bias, residual and output)
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)
    rng = np.random.default_rng(3)
    x, weight, bias = rand(rng, 1, 7, 7, 48), rand(rng, 1, 1, 48, 128), rand(rng, 128)
    res = rand(rng, 1, 7, 7, 128) if residual else None
    ref = conv.relu6_naive(conv.conv2d_naive(x, weight, bias, 1) + (0 if res is None else res))
    calls = []
    run_chunks = splitter.run_chunks
    monkeypatch.setattr(splitter, "run_chunks", lambda fn, n, *a: calls.append(n) or run_chunks(fn, n, *a))
    got = conv.conv2d(x, Linear(weight.reshape(48, 128), bias), 1, 1, splitter, "relu6", res)
    assert np.max(np.abs(got - ref)) < 1e-4
    if conv._pointwise_kernel(Linear(weight.reshape(48, 128), bias)) is not None:  # AVX2 + FMA hosts
        assert calls == [2]  # one share of channels per thread


@pytest.mark.parametrize(
    "h,w,c,k,s",
    # 3 and 5: the ahead-of-time kernels; 7: a size compiled by numba's JIT at first use
    [(9, 7, 5, 3, 2), (8, 8, 16, 3, 1), (14, 14, 40, 5, 2), (7, 7, 33, 5, 1), (112, 112, 32, 3, 2), (9, 9, 16, 7, 1)],
)
def test_depthwise_matches_reference(splitter, h, w, c, k, s):
    rng = np.random.default_rng(c)
    n = 1 if h > 100 else 3
    x, weight, bias = rand(rng, n, h, w, c) * 2, rand(rng, k, k, c), rand(rng, c)
    ref = conv.depthwise_conv_naive(x, weight, bias, s)
    assert np.max(np.abs(conv.depthwise_conv(x, weight, bias, s, splitter) - ref)) < 1e-4
    clipped = conv.depthwise_conv(x, weight, bias, s, splitter, "relu6")
    assert np.max(np.abs(clipped - conv.relu6_naive(ref))) < 1e-4
    assert clipped.min() >= 0 and clipped.max() <= 6


def test_unfused_ops_match_references():
    rng = np.random.default_rng(2)
    x = rand(rng, 2, 5, 5, 8) * 4
    gamma, beta, mean, var = rand(rng, 8), rand(rng, 8), rand(rng, 8), np.abs(rand(rng, 8)) + 0.1
    scale = gamma / np.sqrt(var + 1e-3)
    got = conv.batchnorm(x, scale, beta - mean * scale)
    assert np.max(np.abs(got - conv.batchnorm_naive(x, gamma, beta, mean, var, 1e-3))) < 1e-5
    assert np.array_equal(conv.relu6(x), conv.relu6_naive(x).astype(np.float32))
    assert np.max(np.abs(conv.global_avg_pool(x) - conv.global_avg_pool_naive(x))) < 1e-6


def test_folded_batchnorm_equals_conv_then_batchnorm():
    rng = np.random.default_rng(4)
    x, weight = rand(rng, 2, 6, 6, 3), rand(rng, 3, 3, 3, 5)
    gamma, beta, mean, var = rand(rng, 5), rand(rng, 5), rand(rng, 5), np.abs(rand(rng, 5)) + 0.1
    ref = conv.batchnorm_naive(conv.conv2d_naive(x, weight, None, 2), gamma, beta, mean, var, 1e-3)
    w2, b2 = conv.fold_batchnorm_naive(weight, None, gamma, beta, mean, var, 1e-3)
    assert np.max(np.abs(conv.conv2d_naive(x, w2, b2, 2) - ref)) < 1e-9


def test_layout_mistakes_are_type_errors(splitter):
    x = np.zeros((1, 4, 4, 3), np.float64)
    with pytest.raises(TypeError, match="float32"):
        conv.depthwise_conv(x, np.zeros((3, 3, 3), np.float32), None, 1, splitter)
    with pytest.raises(TypeError, match="C-contiguous"):
        conv.conv2d(
            np.zeros((1, 3, 4, 4), np.float32).transpose(0, 2, 3, 1),
            Linear(np.zeros((3, 2), np.float32)),
            1,
            1,
            splitter,
        )


@pytest.mark.parametrize(
    "h,cin,hidden,cout,k,s,expand,residual",
    [
        (12, 8, 48, 8, 3, 1, True, True),  # stride 1, skip connection
        (13, 8, 48, 12, 5, 2, True, False),  # odd size, stride 2, 5x5
        (9, 16, 16, 8, 3, 1, False, False),  # no expansion (Lite0's first block)
    ],
)
@pytest.mark.parametrize("tile_bytes", [1 << 30, 1 << 17, 32768, 4096])  # all images, 2 images, bands of rows, 1 row
def test_mbconv_matches_its_three_convs(
    splitter, monkeypatch, h, cin, hidden, cout, k, s, expand, residual, tile_bytes
):
    monkeypatch.setattr(conv, "MBCONV_TILE_BYTES", tile_bytes)
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)  # tiles split over both threads
    rng = np.random.default_rng(h + k)
    x = np.abs(rand(rng, 3, h, h + 2, cin))
    we, be = (rand(rng, cin, hidden) * 0.5, rand(rng, hidden)) if expand else (None, None)
    dw, bd, wp, bp = rand(rng, k, k, hidden), rand(rng, hidden), rand(rng, hidden, cout) * 0.3, rand(rng, cout)
    oh, ow = -(-h // s), -(-(h + 2) // s)
    res = rand(rng, 3, oh, ow, cout) if residual else None
    ref = conv.mbconv_naive(x, we, be, dw, bd, s, wp, bp, res)
    got = conv.mbconv(x, Linear(we, be) if expand else None, dw, bd, s, Linear(wp, bp), splitter, res)
    assert got.shape == ref.shape == (3, oh, ow, cout)
    assert np.max(np.abs(got - ref)) < 1e-4


needs_simd = pytest.mark.skipif(
    depthwise_simd.kernel(3) is None, reason="no AVX2/FMA: the numba kernel does every pixel"
)


@needs_simd
@pytest.mark.parametrize(
    "h,w,c,k,s",
    [(8, 11, 16, 3, 1), (9, 7, 32, 3, 2), (14, 14, 48, 5, 1), (13, 10, 16, 5, 2), (7, 7, 64, 5, 1), (3, 3, 16, 5, 1)],
)
@pytest.mark.parametrize("padded", [False, True])
def test_depthwise_simd_rows_match_reference(h, w, c, k, s, padded):
    """depthwise_rows over uneven row ranges (cutting images), pixel tails of 1-3, a channel
    slice of a wider filter, both the interior+border split and the zero-padded copy."""
    rng = np.random.default_rng(h * w + c)
    n, oh, ow = 3, -(-h // s), -(-w // s)
    x, weight, bias = rand(rng, n, h, w, c) * 2, rand(rng, k, k, c + 16), rand(rng, c + 16)
    ref = conv.relu6_naive(conv.depthwise_conv_naive(x, weight[:, :, 16:], bias[16:], s))
    (pt, _), (pl, _) = conv.same_padding(h, k, s), conv.same_padding(w, k, s)
    lo, hi = np.float32(0), np.float32(6)
    s1 = RowSplitter(1)
    out = np.full((n, oh, ow, c), np.nan, np.float32)
    cuts = [0, n * oh] if padded else [0, 1, oh + 1, n * oh - 1, n * oh]
    for r0, r1 in itertools.pairwise(cuts):
        conv.depthwise_rows(
            x, weight, bias, out, s, pt, pl, lo, hi, 0, h, 0, 16, r0, r1, s1.scratch if padded else None
        )
    s1.close()
    assert np.max(np.abs(out - ref)) < 1e-4


@needs_simd
def test_depthwise_simd_equals_numba_kernel(splitter, monkeypatch):
    """Same sums in the same order (bias, then taps (a, b)): the two kernels agree to rounding."""
    rng = np.random.default_rng(5)
    x, weight, bias = rand(rng, 2, 28, 28, 240), rand(rng, 5, 5, 240), rand(rng, 240)
    fast = conv.depthwise_conv(x, weight, bias, 1, splitter, "relu6")
    monkeypatch.setattr(conv, "SIMD_DEPTHWISE", False)
    slow = conv.depthwise_conv(x, weight, bias, 1, splitter, "relu6")
    assert np.max(np.abs(fast - slow)) < 1e-5


def test_depthwise_simd_interior_ranges():
    # 14 wide, 5x5 stride 1, padding 2: windows inside for output columns 2..11
    assert depthwise_simd.interior_columns(14, 5, 1, 2) == (2, 12)
    # 7 high, 5x5 stride 2 (pad top 1): of 4 output rows only row 1; none in a band from output row 2
    assert depthwise_simd.interior_rows(0, 4, 7, 5, 2, 1) == (1, 2)
    assert depthwise_simd.interior_rows(2, 2, 7, 5, 2, 1) == (0, 0)


@needs_simd
@pytest.mark.parametrize(
    "h,w,cin,cout,k,s",
    [(224, 224, 3, 32, 3, 2), (9, 7, 3, 16, 3, 2), (10, 11, 2, 48, 5, 2), (8, 8, 4, 16, 3, 1), (7, 6, 3, 32, 3, 2)],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_simd_dense_matches_reference_and_gemm_path(h, w, cin, cout, k, s, threads, monkeypatch):
    """The stem's direct SIMD kernel (no im2col) over chunks that cut images and odd padding,
    against the float64 definition and against im2col + sgemm."""
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)
    rng = np.random.default_rng(h * cout + k)
    n = 1 if h > 100 else 3
    x, weight, bias = rand(rng, n, h, w, cin) * 2, rand(rng, k, k, cin, cout), rand(rng, cout)
    ref = conv.relu6_naive(conv.conv2d_naive(x, weight, bias, s))
    lin = Linear(weight.reshape(-1, cout), bias)
    sp = RowSplitter(threads)
    try:
        assert conv.SIMD_DENSE and depthwise_simd.dense_kernel(k, k * cin) is not None
        got = conv.conv2d(x, lin, k, s, sp, "relu6")
        monkeypatch.setattr(conv, "SIMD_DENSE", False)
        gemm = conv.conv2d(x, lin, k, s, sp, "relu6")
    finally:
        sp.close()
    assert np.max(np.abs(got - ref)) < 1e-4
    assert np.max(np.abs(got - gemm)) < 1e-5


@needs_simd
@pytest.mark.parametrize("tile_bytes", [1 << 30, 32768])  # one tile (hidden channels split over threads), bands
def test_mbconv_simd_expand_equals_sgemm_expand(splitter, monkeypatch, tile_bytes):
    """The short-reduction expand through the SIMD dense kernel (channel slices at c0 = 0 and 32)
    against sgemm + epilogue, and both against the three naive convs."""
    monkeypatch.setattr(conv, "MBCONV_TILE_BYTES", tile_bytes)
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)
    rng = np.random.default_rng(7)
    x = np.abs(rand(rng, 2, 11, 10, 24))
    we, be, dw, bd = rand(rng, 24, 64) * 0.5, rand(rng, 64), rand(rng, 5, 5, 64), rand(rng, 64)
    wp, bp = rand(rng, 64, 16) * 0.3, rand(rng, 16)
    ref = conv.mbconv_naive(x, we, be, dw, bd, 2, wp, bp, None)
    assert conv.DENSE_EXPAND_MAX_CIN >= 24
    panel = conv.mbconv(x, Linear(we, be), dw, bd, 2, Linear(wp, bp), splitter)  # pointwise_simd
    monkeypatch.setattr(conv, "SIMD_POINTWISE", False)
    fast = conv.mbconv(x, Linear(we, be), dw, bd, 2, Linear(wp, bp), splitter)
    monkeypatch.setattr(conv, "DENSE_EXPAND_MAX_CIN", 0)
    gemm = conv.mbconv(x, Linear(we, be), dw, bd, 2, Linear(wp, bp), splitter)
    for got in (panel, fast, gemm):
        assert np.max(np.abs(got - ref)) < 1e-4
    assert np.max(np.abs(fast - gemm)) < 1e-5 and np.max(np.abs(panel - gemm)) < 1e-5
