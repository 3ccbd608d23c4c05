"""Numeric kernels of the encoder, each fast version next to its naive reference.

The ``*_naive`` functions are the definition: float64, whole-array, written as the formula
reads, used only by tests. The fast versions are float32 and in place: elementwise epilogues
(bias, GELU, ReLU, LayerNorm, softmax) call the compiled row kernels of ``engine.kernels.rows``
(numba source in ``numba_rows``) on each thread's row range (``RowSplitter``); matrix products
(attention's per-head GEMMs, pooling) stay NumPy/BLAS. The trade-off: the kernels are compiled
once per machine and kernel source (``openhood.aot``; each process loads them without numba) in
exchange for one pass per row instead of a chain of ~20 ufunc calls; below ~64k elements
everything runs on one thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from openhood.engine.kernels import rows
from openhood.engine.kernels.parallel import MIN_PARALLEL_ELEMENTWISE, RowSplitter

MASK_NEG = np.float32(-1e9)  # additive bias of a padded key: exp() of it is exactly 0.


# ---------------------------------------------------------------- naive references (float64)


def erf_naive(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, dtype=np.float64))
    return out


def gelu_naive(x: np.ndarray) -> np.ndarray:
    """Exact-erf GELU, float64.

    >>> gelu_naive(np.array([-1.0, 0.0, 1.0])).round(4).tolist()
    [-0.1587, 0.0, 0.8413]
    """
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + erf_naive(x / math.sqrt(2.0)))


def relu_naive(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0)


def softmax_naive(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, float64.

    >>> softmax_naive(np.array([0.0, np.log(3.0)])).tolist()
    [0.25, 0.75]
    """
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


def layernorm_naive(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * gamma + beta
    return out


def linear_naive(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    y = np.asarray(x, dtype=np.float64) @ np.asarray(weight, dtype=np.float64)
    return y if bias is None else y + bias


def attention_naive(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, attention_mask: np.ndarray, heads: int, scale: float
) -> np.ndarray:
    """q, k, v (B, T, C); attention_mask (B, T) 0/1 → context (B, T, C), float64."""
    b, t, c = q.shape
    dh = c // heads

    def split(a: np.ndarray) -> np.ndarray:  # (B, T, C) -> (B, H, T, dh)
        return np.asarray(a, dtype=np.float64).reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * scale  # (B, H, T, T)
    scores = np.where(np.asarray(attention_mask)[:, None, None, :] > 0, scores, -np.inf)
    ctx = softmax_naive(scores) @ split(v)  # (B, H, T, dh)
    out: np.ndarray = ctx.transpose(0, 2, 1, 3).reshape(b, t, c)
    return out


def mean_pool_naive(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """hidden (B, T, C), mask (B, T) → (B, C): average over real tokens only."""
    m = np.asarray(attention_mask, dtype=np.float64)[:, :, None]
    out: np.ndarray = (np.asarray(hidden, dtype=np.float64) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return out


def l2_normalize_naive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    out: np.ndarray = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    return out


# ---------------------------------------------------------------- fast kernels (float32, in place)
# Thin wrappers over the compiled row kernels of ``engine.kernels.rows``: check the layout, fill in
# "no bias" / "no residual", and split the rows over the threads (the kernels release the GIL).


def _rows(y: np.ndarray) -> np.ndarray:
    if y.dtype != np.float32 or y.ndim != 2 or not y.flags.c_contiguous:
        raise TypeError(
            f"expected a C-contiguous 2-D float32 array, got {y.dtype} {y.shape} (C-contiguous: {y.flags.c_contiguous})"
        )
    return y


def _bias_or_zeros(bias: np.ndarray | None, width: int) -> np.ndarray:
    """The kernels always take a bias row; ``None`` becomes a read-only zero row: a prefix of
    one shared row, grown to the widest width asked. Not a cache keyed by width: attention asks
    for one per sequence length, and one row per length would grow with every new length."""
    global _ZEROS
    if bias is not None:
        return bias
    zeros = _ZEROS
    if zeros.size < width:
        zeros = np.zeros(width, dtype=np.float32)
        zeros.flags.writeable = False
        _ZEROS = zeros  # a racing thread may replace it too: both are zeros, either is fine
    return zeros[:width]


_ZEROS = np.zeros(0, dtype=np.float32)
_NO_RESIDUAL = np.empty((0, 0), dtype=np.float32)


def _split(fn: Callable[[int, int], None], y: np.ndarray, splitter: RowSplitter) -> np.ndarray:
    """``fn(start, stop)`` on each thread's row range of y (one range when y is small)."""
    n, width = _rows(y).shape
    splitter.run(fn, n, width, MIN_PARALLEL_ELEMENTWISE)
    return y


def gelu_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None) -> np.ndarray:
    """y (N, F) ← GELU(y + bias) in place (exact-erf GELU)."""
    b = _bias_or_zeros(bias, y.shape[1])
    return _split(lambda s, e: rows.gelu_rows(y[s:e], b), y, splitter)


def relu_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None) -> np.ndarray:
    """y (N, F) ← max(y + bias, 0) in place."""
    b = _bias_or_zeros(bias, y.shape[1])
    return _split(lambda s, e: rows.relu_rows(y[s:e], b), y, splitter)


def softmax_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None) -> np.ndarray:
    """y (N, F) ← softmax(y + bias) over the last axis, in place; bias (F,)."""
    f = y.shape[1]
    b = _bias_or_zeros(bias, f).reshape(1, f)  # one bias row shared by every row
    one = np.float32(1.0)

    def run(s: int, e: int) -> None:
        rows.softmax_rows(y[s:e], b, max(1, e - s), one, splitter.scratch("bits", (f,), "int32"))

    return _split(run, y, splitter)


def add_(y: np.ndarray, bias: np.ndarray, splitter: RowSplitter) -> np.ndarray:
    """y (N, F) += bias (F,), in place."""
    return _split(lambda s, e: rows.add_rows(y[s:e], bias), y, splitter)


def layernorm_(
    y: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float,
    splitter: RowSplitter,
    residual: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """y (N, C) ← LayerNorm(y + bias + residual) in place (the fused epilogue of a Linear);
    residual (N, C) C-contiguous or None."""
    c = y.shape[1]
    b = _bias_or_zeros(bias, c)
    eps32 = np.float32(eps)
    if residual is None:
        none = _NO_RESIDUAL  # the kernel's "no residual": zero rows
        return _split(lambda s, e: rows.layernorm_rows(y[s:e], b, none, gamma, beta, eps32), y, splitter)
    res = _rows(residual)
    return _split(lambda s, e: rows.layernorm_rows(y[s:e], b, res[s:e], gamma, beta, eps32), y, splitter)


def attention_mask_bias(attention_mask: np.ndarray) -> np.ndarray | None:
    """(B, T) 0/1 → (B, 1, 1, T) float32 additive bias: 0 for real keys, -1e9 for padding.

    ``None`` when nothing is padded (batch 1, length-sorted batches): attention then skips a
    full pass over its (B, H, T, T) scores.

    >>> attention_mask_bias(np.array([[1, 1, 0]])).ravel().tolist()
    [0.0, 0.0, -1000000000.0]
    >>> attention_mask_bias(np.array([[1, 1]])) is None
    True
    """
    m = np.asarray(attention_mask)
    if m.all():
        return None
    bias = np.where(m > 0, np.float32(0.0), MASK_NEG).astype(np.float32, copy=False)
    return bias[:, None, None, :]


def attention_(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    bias: np.ndarray | None,
    heads: int,
    scale: float,
    out: np.ndarray,
    splitter: RowSplitter,
) -> np.ndarray:
    """Multi-head attention on (B, T, C)-shaped views (may be column slices of a packed QKV).

    q, k, v: (B, T, C) views; bias (B, 1, 1, T) or None; out (B, T, C) written in place. Heads are
    strided views, never copies: every batched matmul has a unit-stride axis, so NumPy hands
    it to BLAS directly. Samples are processed in groups whose (g, H, T, T) score block fits
    in cache, groups split over the cores.
    """
    b, t, c = q.shape
    dh = c // heads

    def heads_view(a: np.ndarray) -> np.ndarray:  # (B, T, C) -> (B, H, T, dh), a view
        return a.reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    qh, kh, vh, oh = heads_view(q), heads_view(k), heads_view(v), heads_view(out)
    kt = kh.transpose(0, 1, 3, 2)  # (B, H, dh, T)
    group = max(1, 65536 // (heads * t * t))
    # (B, T) additive mask rows, sample g's row serving its H*T score rows; no mask: one zero
    # row for all of them.
    if bias is None:
        mask_rows, rows_per_mask = _bias_or_zeros(None, t).reshape(1, t), 1 << 62
    else:
        mask_rows, rows_per_mask = np.ascontiguousarray(bias.reshape(b, t), dtype=np.float32), heads * t
    scale32 = np.float32(scale)

    def work(s0: int, s1: int) -> None:
        bits = splitter.scratch("bits", (t,), "int32")
        for g0 in range(s0, s1, group):
            g1 = min(g0 + group, s1)
            scores = splitter.scratch("scores", (g1 - g0, heads, t, t))
            np.matmul(qh[g0:g1], kt[g0:g1], out=scores)  # (g, H, T, T)
            # scale, mask and softmax in one compiled pass per row, (g*H*T, T)
            rows.softmax_rows(
                scores.reshape(-1, t), mask_rows[g0:g1] if bias is not None else mask_rows, rows_per_mask, scale32, bits
            )
            np.matmul(scores, vh[g0:g1], out=oh[g0:g1])  # (g, H, T, dh)

    splitter.run(work, b, heads * t * t)
    return out


def mean_pool(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """hidden (B, T, C), mask (B, T) → (B, C) float32 mean over real tokens (one batched GEMV).

    >>> mean_pool(np.arange(6, dtype=np.float32).reshape(1, 3, 2), np.array([[1, 1, 0]])).tolist()
    [[1.0, 2.0]]
    """
    m = np.asarray(attention_mask, dtype=np.float32)
    summed: np.ndarray = np.matmul(m[:, None, :], hidden)[:, 0, :]  # (B, C)
    counts = np.maximum(m.sum(axis=1, keepdims=True), np.float32(1e-9))
    summed /= counts
    return summed


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """(B, C) → rows scaled to unit L2 norm (norm floored at 1e-12 like torch's F.normalize).

    >>> l2_normalize(np.array([[3.0, 4.0]], np.float32)).astype(np.float64).round(6).tolist()
    [[0.6, 0.8]]
    """
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    np.maximum(norms, np.float32(1e-12), out=norms)
    out: np.ndarray = x / norms
    return out
