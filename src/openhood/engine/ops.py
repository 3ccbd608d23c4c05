"""Numeric kernels of the encoder, each fast version next to its naive reference.

The ``*_naive`` functions are the definition: float64, whole-array, written as the formula
reads, used only by tests. The fast versions are float32, in place, and walk rows in
cache-sized chunks split over the cores (``RowSplitter``), so a chain of ufunc passes touches
DRAM once. NumPy has no ``erf``; ``erf_fast`` is a float32 rational approximation (Eigen's:
x P(x^2) / Q(x^2) on [-4, 4], |error| < 4e-7), with no exp: measured, NumPy's exp costs ~10
multiplies per element here. GELU folds its 1/sqrt(2) and 0.5 into the coefficients. The
trade-off: many small ufunc calls (~1 µs of Python each) in exchange for cache residency;
below ~64k elements everything runs on one thread.
"""

from __future__ import annotations

import math

import numpy as np

from openhood.engine.parallel import RowSplitter

# erf(x) ~= x P(x^2) / Q(x^2) on x in [-4, 4] (erf is +-1 in float32 beyond): the float32
# rational approximation of Eigen / XLA. Pure arithmetic: NumPy's exp runs ~10x slower per
# element than a multiply here, so an exp-based formula (A&S 7.1.26) loses to 27 cheap passes.
_ERF_NUM = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
            -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10)  # x^1, x^3, …, x^13
_ERF_DEN = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
            -1.45660718464996e-05)  # x^0, x^2, …, x^8
_ERF_CLAMP = 4.0
_ERF_P = tuple(np.float32(c) for c in _ERF_NUM)
_ERF_Q = tuple(np.float32(c) for c in _ERF_DEN)
# GELU(x) = x * (0.5 + 0.5 erf(x / sqrt 2)): with u = x / sqrt 2, u^2 = x^2 / 2, so the
# coefficients of x^(2j) get (1/2)^j, and the numerator also 0.5 / sqrt 2.
_GELU_P = tuple(np.float32(c * 0.5**j * 0.5 / math.sqrt(2.0)) for j, c in enumerate(_ERF_NUM))
_GELU_Q = tuple(np.float32(c * 0.5**j) for j, c in enumerate(_ERF_DEN))
_GELU_CLAMP = _ERF_CLAMP * math.sqrt(2.0)
MASK_NEG = np.float32(-1e9)  # additive bias of a padded key: exp() of it is exactly 0.


# ---------------------------------------------------------------- naive references (float64)


def erf_naive(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, dtype=np.float64))


def gelu_naive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + erf_naive(x / math.sqrt(2.0)))


def relu_naive(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0)


def softmax_naive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm_naive(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def linear_naive(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    y = np.asarray(x, dtype=np.float64) @ np.asarray(weight, dtype=np.float64)
    return y if bias is None else y + bias


def attention_naive(q, k, v, attention_mask, heads: int, scale: float) -> np.ndarray:
    """q, k, v (B, T, C); attention_mask (B, T) 0/1 → context (B, T, C), float64."""
    b, t, c = q.shape
    dh = c // heads

    def split(a):  # (B, T, C) -> (B, H, T, dh)
        return np.asarray(a, dtype=np.float64).reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * scale  # (B, H, T, T)
    scores = np.where(np.asarray(attention_mask)[:, None, None, :] > 0, scores, -np.inf)
    ctx = softmax_naive(scores) @ split(v)  # (B, H, T, dh)
    return ctx.transpose(0, 2, 1, 3).reshape(b, t, c)


def mean_pool_naive(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """hidden (B, T, C), mask (B, T) → (B, C): average over real tokens only."""
    m = np.asarray(attention_mask, dtype=np.float64)[:, :, None]
    return (np.asarray(hidden, dtype=np.float64) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def l2_normalize_naive(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


# ---------------------------------------------------------------- fast kernels (float32, in place)


def _rational_(u: np.ndarray, q: np.ndarray, p: np.ndarray, num, den) -> np.ndarray:
    """p ← u * num(u^2) / den(u^2) for a clamped u; q is scratch; u is overwritten."""
    np.multiply(u, u, out=q)  # u^2
    np.multiply(q, num[-1], out=p)
    for c in num[-2:0:-1]:  # Horner in u^2
        p += c
        p *= q
    p += num[0]
    p *= u
    np.multiply(q, den[-1], out=u)
    for c in den[-2:0:-1]:
        u += c
        u *= q
    u += den[0]
    np.divide(p, u, out=p)
    return p


def _const(value: float, like: np.ndarray) -> np.ndarray:
    """A read-only array of ``value`` shaped like ``like``: NumPy's min/max with an array
    operand run ~4x faster than with a broadcast scalar."""
    size = 1 << max(0, like.size - 1).bit_length()  # power-of-two sizes: a bounded cache
    key = (float(value), size)
    arr = _CONSTS.get(key)
    if arr is None:
        arr = np.full(size, value, dtype=np.float32)
        arr.flags.writeable = False
        _CONSTS[key] = arr
    return arr[: like.size].reshape(like.shape)


_CONSTS: dict[tuple[float, int], np.ndarray] = {}


def _clamp(x: np.ndarray, limit: float, out: np.ndarray) -> np.ndarray:
    np.minimum(x, _const(limit, x), out=out)
    np.maximum(out, _const(-limit, x), out=out)
    return out


def erf_fast(x: np.ndarray) -> np.ndarray:
    """float32 erf, |error| < 4e-7 (the rational approximation above, evaluated in float32)."""
    x = np.asarray(x, dtype=np.float32)
    u, q, p = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    return _rational_(_clamp(x, _ERF_CLAMP, u), q, p, _ERF_P, _ERF_Q)


def _gelu_chunk(x: np.ndarray, u: np.ndarray, q: np.ndarray, p: np.ndarray) -> None:
    """x ← GELU(x) = x (0.5 + 0.5 erf(x / sqrt 2)) in place on one cache-sized chunk."""
    _rational_(_clamp(x, _GELU_CLAMP, u), q, p, _GELU_P, _GELU_Q)  # p = 0.5 erf(x / sqrt 2)
    p += np.float32(0.5)
    x *= p


def _softmax_chunk(x: np.ndarray, m: np.ndarray) -> None:
    """Row softmax in place; x (r, T), m (r, 1) scratch."""
    np.max(x, axis=1, keepdims=True, out=m)
    x -= m
    np.exp(x, out=x)
    np.sum(x, axis=1, keepdims=True, out=m)
    np.reciprocal(m, out=m)
    x *= m


def _layernorm_chunk(x, gamma, beta, eps, inv_c, stats, sq) -> None:
    """Row LayerNorm in place; x (r, C); stats (r, 1), sq (r, C) scratch; inv_c (C, 1) = 1/C."""
    np.matmul(x, inv_c, out=stats)  # mean via GEMV: faster than a last-axis reduction
    x -= stats
    np.multiply(x, x, out=sq)
    np.matmul(sq, inv_c, out=stats)  # variance
    stats += eps
    np.sqrt(stats, out=stats)
    np.reciprocal(stats, out=stats)
    x *= stats
    x *= gamma
    x += beta


def gelu_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None, parallel: bool = True) -> np.ndarray:
    """y (N, F) ← GELU(y + bias) in place; ``parallel=False`` stays on the calling thread
    (for epilogues already running inside a worker)."""
    n, f = y.shape

    def chunk(s: int, e: int) -> None:
        x = y[s:e]
        if bias is not None:
            x += bias
        shape = x.shape
        _gelu_chunk(x, splitter.scratch("u", shape), splitter.scratch("q", shape), splitter.scratch("p", shape))

    splitter.for_chunks(chunk, n, f, parallel)
    return y


def relu_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None, parallel: bool = True) -> np.ndarray:
    """y (N, F) ← max(y + bias, 0) in place."""
    n, f = y.shape

    def chunk(s: int, e: int) -> None:
        x = y[s:e]
        if bias is not None:
            x += bias
        np.maximum(x, _const(0.0, x), out=x)

    splitter.for_chunks(chunk, n, f, parallel)
    return y


def softmax_(y: np.ndarray, splitter: RowSplitter, bias: np.ndarray | None = None, parallel: bool = True) -> np.ndarray:
    """y (N, F) ← softmax(y + bias) over the last axis, in place."""
    n, f = y.shape

    def chunk(s: int, e: int) -> None:
        x = y[s:e]
        if bias is not None:
            x += bias
        _softmax_chunk(x, splitter.scratch("m", (e - s, 1)))

    splitter.for_chunks(chunk, n, f, parallel)
    return y


def add_(y: np.ndarray, other: np.ndarray, splitter: RowSplitter, parallel: bool = True) -> np.ndarray:
    """y (N, F) += other (N, F) or (F,), in place."""
    n, f = y.shape
    full = other.ndim == 2

    def chunk(s: int, e: int) -> None:
        y[s:e] += other[s:e] if full else other

    splitter.for_chunks(chunk, n, f, parallel)
    return y


def layernorm_(
    y: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float,
    splitter: RowSplitter,
    residual: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    parallel: bool = True,
) -> np.ndarray:
    """y (N, C) ← LayerNorm(y + bias + residual) in place (the fused epilogue of a Linear)."""
    n, c = y.shape
    inv_c = np.full((c, 1), 1.0 / c, dtype=np.float32)
    eps32 = np.float32(eps)

    def chunk(s: int, e: int) -> None:
        x = y[s:e]
        if bias is not None:
            x += bias
        if residual is not None:
            x += residual[s:e]
        _layernorm_chunk(x, gamma, beta, eps32, inv_c, splitter.scratch("stats", (e - s, 1)), splitter.scratch("sq", x.shape))

    splitter.for_chunks(chunk, n, c, parallel)
    return y


def attention_mask_bias(attention_mask: np.ndarray) -> np.ndarray | None:
    """(B, T) 0/1 → (B, 1, 1, T) float32 additive bias: 0 for real keys, -1e9 for padding.

    ``None`` when nothing is padded (batch 1, length-sorted batches): attention then skips a
    full pass over its (B, H, T, T) scores.
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

    def heads_view(a):  # (B, T, C) -> (B, H, T, dh), a view
        return a.reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    qh, kh, vh, oh = heads_view(q), heads_view(k), heads_view(v), heads_view(out)
    kt = kh.transpose(0, 1, 3, 2)  # (B, H, dh, T)
    group = max(1, 65536 // (heads * t * t))
    scale32 = np.float32(scale)

    def work(s0: int, s1: int) -> None:
        for g0 in range(s0, s1, group):
            g1 = min(g0 + group, s1)
            scores = splitter.scratch("scores", (g1 - g0, heads, t, t))
            np.matmul(qh[g0:g1], kt[g0:g1], out=scores)  # (g, H, T, T)
            if scale != 1.0:
                scores *= scale32
            if bias is not None:
                scores += bias[g0:g1]
            rows = scores.reshape(-1, t)
            _softmax_chunk(rows, splitter.scratch("m", (rows.shape[0], 1)))
            np.matmul(scores, vh[g0:g1], out=oh[g0:g1])  # (g, H, T, dh)

    splitter.run(work, b, heads * t * t)
    return out


def mean_pool(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """hidden (B, T, C), mask (B, T) → (B, C) float32 mean over real tokens (one batched GEMV)."""
    m = np.asarray(attention_mask, dtype=np.float32)
    summed = np.matmul(m[:, None, :], hidden)[:, 0, :]  # (B, C)
    counts = np.maximum(m.sum(axis=1, keepdims=True), np.float32(1e-9))
    summed /= counts
    return summed


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """(B, C) → rows scaled to unit L2 norm (norm floored at 1e-12 like torch's F.normalize)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    np.maximum(norms, np.float32(1e-12), out=norms)
    return x / norms
