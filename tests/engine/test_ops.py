"""Each fast float32 kernel against its naive float64 reference (engine/kernels/ops.py)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from openhood.engine.kernels import ops, rows
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter


@pytest.fixture(scope="module", params=[1, 2], ids=["1thread", "2threads"])
def splitter(request):
    sp = RowSplitter(request.param)
    yield sp
    sp.close()


def rand(shape, scale=1.0, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# Odd shapes: one row, widths that are not a multiple of the 8-lane vector, a width below it.
ODD_SHAPES = [(1, 7), (1, 1536), (3, 13), (301, 1537), (129, 384)]


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_gelu_matches_exact_erf_gelu(splitter, shape):
    x = rand(shape, 3.0)
    x.flat[:4] = [0.0, -0.0, 30.0, -30.0][: x.size]  # beyond the rational's clamp erf is +-1
    bias = rand(shape[1], 0.5, seed=1)
    y = ops.gelu_(x.copy(), splitter, bias=bias)
    ref = ops.gelu_naive(x.astype(np.float64) + bias)
    assert y.dtype == np.float32
    assert np.max(np.abs(y - ref)) < 2e-6
    assert np.max(np.abs(ops.gelu_(x.copy(), splitter) - ops.gelu_naive(x))) < 2e-6  # no bias
    # exact-erf GELU, not the tanh approximation: they differ by ~1e-4 near |x| = 2
    assert ops.gelu_naive(np.array([2.0]))[0] == pytest.approx(1.9544997361, abs=1e-9)
    assert ops.erf_naive(np.array([0.5]))[0] == pytest.approx(math.erf(0.5))


def test_gelu_erf_accuracy_over_the_whole_range(splitter):
    # dense grid through the clamp points (+-4 sqrt 2) and the tails: the rational erf's error
    x = np.linspace(-12, 12, 48003, dtype=np.float32).reshape(3, -1)
    y = ops.gelu_(x.copy(), splitter)
    assert np.max(np.abs(y - ops.gelu_naive(x))) < 4e-6  # |x| up to 12: 4e-7 of erf times |x|/2


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_relu_and_add(splitter, shape):
    x, bias = rand(shape, 4.0), rand(shape[1], 1.0, 3)
    assert np.array_equal(ops.relu_(x.copy(), splitter), ops.relu_naive(x).astype(np.float32))
    assert np.array_equal(ops.relu_(x.copy(), splitter, bias=bias), np.maximum(x + bias, 0))
    assert np.array_equal(ops.add_(x.copy(), bias, splitter), x + bias)


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_softmax(splitter, shape):
    x = rand(shape, 4.0)
    sm = ops.softmax_(x.copy(), splitter)
    assert np.max(np.abs(sm - ops.softmax_naive(x))) < 1e-6
    assert np.allclose(sm.sum(axis=1), 1.0, atol=1e-5)
    bias = rand(shape[1], 2.0, 4)
    sm_b = ops.softmax_(x.copy(), splitter, bias=bias)
    assert np.max(np.abs(sm_b - ops.softmax_naive(x.astype(np.float64) + bias))) < 1e-6
    # far-apart logits: exp underflows to exactly 0, the max gets weight 1
    wide = np.array([[0.0, -200.0, 50.0, -1e9, 49.0]], np.float32)
    ref = ops.softmax_naive(wide)
    got = ops.softmax_(wide.copy(), splitter)
    assert np.max(np.abs(got - ref)) < 1e-6 and got[0, 3] == 0.0 and got[0, 1] == 0.0


@pytest.mark.parametrize("rows,c", [(1, 384), (5, 384), (700, 384), (9, 13)])
def test_layernorm_with_bias_and_residual(splitter, rows, c):
    x, res = rand((rows, c), 2.0, 1), rand((rows, c), 1.0, 2)
    gamma, beta, bias = rand(c, 1.0, 3), rand(c, 1.0, 4), rand(c, 1.0, 5)
    y = ops.layernorm_(x.copy(), gamma, beta, 1e-12, splitter, residual=res, bias=bias)
    ref = ops.layernorm_naive(x.astype(np.float64) + bias + res, gamma, beta, 1e-12)
    assert np.max(np.abs(y - ref)) < 2e-5
    y2 = ops.layernorm_(x.copy() + 100.0, gamma, beta, 1e-12, splitter)  # large mean: two-pass variance
    assert np.max(np.abs(y2 - ops.layernorm_naive(x.astype(np.float64) + 100.0, gamma, beta, 1e-12))) < 2e-4


def test_padded_rows_do_not_leak_into_real_rows(splitter):
    # a batch whose padding rows hold garbage: each row is computed on its own
    x = rand((64, 1536), 3.0)
    garbage = x.copy()
    garbage[40:] = np.float32(1e30)
    ref_rows = ops.gelu_(x.copy(), splitter)[:40]
    assert np.array_equal(ops.gelu_(garbage.copy(), splitter)[:40], ref_rows)
    gamma, beta = rand(1536, 1.0, 3), rand(1536, 1.0, 4)
    assert np.array_equal(
        ops.layernorm_(garbage.copy(), gamma, beta, 1e-12, splitter)[:40],
        ops.layernorm_(x.copy(), gamma, beta, 1e-12, splitter)[:40],
    )


def test_threads_give_identical_results():
    x, bias = rand((1000, 1537), 3.0), rand(1537, 1.0, 1)
    outs = []
    for threads in (1, 2):
        sp = RowSplitter(threads)
        outs.append(ops.gelu_(x.copy(), sp, bias=bias))
        sp.close()
    assert np.array_equal(outs[0], outs[1])


def test_kernels_refuse_wrong_layouts(splitter):
    x = rand((8, 16))
    with pytest.raises(TypeError, match="C-contiguous 2-D float32"):
        ops.gelu_(x[:, ::2], splitter)  # a strided view would be silently copied otherwise
    with pytest.raises(TypeError, match="C-contiguous 2-D float32"):
        ops.add_(x.astype(np.float64), np.zeros(16), splitter)
    ro = rand(16)
    ro.flags.writeable = False  # read-only weights (e.g. memory-mapped) are fine as inputs
    assert np.array_equal(ops.add_(x.copy(), ro, splitter), x + ro)


def test_nan_propagates(splitter):
    # fastmath stops short of nnan: a NaN input must not come out as a plausible number
    x = rand((3, 384))
    x[1, 17] = np.nan
    g = np.ones(384, np.float32)
    for y in (
        ops.gelu_(x.copy(), splitter),
        ops.softmax_(x.copy(), splitter),
        ops.layernorm_(x.copy(), g, g, 1e-12, splitter),
    ):
        assert np.isnan(y[1, 17]) and np.isfinite(y[[0, 2]]).all()
    assert np.isnan(ops.softmax_(x.copy(), splitter)[1]).all()  # the whole softmax row


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="pycc needs a C compiler")
def test_row_kernels_load_ahead_of_time_without_numba():
    """The row kernels come from the ahead-of-time library (this machine has a C compiler): a
    fresh process that runs them has not imported numba."""
    code = (
        "import sys, numpy as np; from openhood.engine.kernels import rows; y = np.ones((2, 4), np.float32); "
        "rows.add_rows(y, np.ones(4, np.float32)); print(rows.ROWS.backing, y.sum(), 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.split() == ["aot", "16.0", "False"]


def test_row_kernels_reject_a_wrong_dtype_instead_of_reading_garbage():
    y = np.ones((2, 4), np.float32)
    with pytest.raises(TypeError, match="float32"):
        rows.add_rows(y, np.ones(4, np.float64))
    with pytest.raises(TypeError, match="C-contiguous"):
        rows.add_rows(np.ones((4, 4), np.float32)[:, ::2], np.ones(2, np.float32))
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        rows.add_rows(y)


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
