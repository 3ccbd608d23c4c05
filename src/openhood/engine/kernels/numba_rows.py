"""Compiled (numba) row kernels for the engine's elementwise epilogues, all float32, in place.

What: bias + GELU, bias + ReLU, bias add, bias + residual + LayerNorm, and the scaled, masked
row softmax of attention. Each kernel walks an (N, F) C-contiguous array row by row, one pass
per row while the row sits in L1, with no temporaries.

Why numba: the same math as a chain of NumPy ufuncs costs one Python call (~1 µs) and one
memory pass per operation, and GELU alone is ~27 of them; with two ``RowSplitter`` threads the
tiny calls also ping-pong the GIL, so a second thread did not help (measured while the choice
was made; docs/benchmarks.md § Engine tables the compiled kernels). Compiled with ``nogil=True``, a kernel runs on a thread's whole row range without
the GIL, so the splitter's threads really run in parallel, and LLVM vectorizes the inner loops
(AVX2 + FMA on the host CPU).

Numerics: GELU keeps the exact-erf form through the same float32 rational approximation of erf
as before (Eigen's x·P(x²)/Q(x²), |error| < 4e-7); softmax's exp is a range reduction
(2^n · 2^f, |f| ≤ 1/2) with a degree-7 polynomial, relative error ~1e-7, because numba's
``np.exp`` is a scalar libm call that stops the loop from vectorizing. ``fastmath`` is limited
to ``contract`` (FMA), ``reassoc`` (vector partial sums in reductions) and ``nsz``: no ``afn``
(approximate functions) and no ``nnan``/``ninf``, so NaN and infinity still propagate.

This module is the kernels' source. ``engine/kernels/rows.py`` gives each its one explicit
signature and compiles them ahead of time into a library loaded without numba (``openhood.aot``),
or through numba's JIT where that cannot be built; a call with another layout (non-contiguous
rows, float64) raises ``TypeError`` instead of silently compiling a copy. ``LazyKernel`` is the
JIT-only way the CNN kernels (``conv_kernels``) still take: compiled for one explicit signature
on first call, cached on disk (``cache=True``, openhood's per-user numba cache directory).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from openhood.engine.kernels.rows import OPTIONS

_F = np.float32
# erf(x) ~= x P(x^2) / Q(x^2) on x in [-4, 4] (erf is +-1 in float32 beyond): Eigen / XLA.
ERF_NUM = (
    -1.60960333262415e-02,
    -2.95459980854025e-03,
    -7.34990630326855e-04,
    -5.69250639462346e-05,
    -2.10102402082508e-06,
    2.77068142495902e-08,
    -2.72614225801306e-10,
)  # x^1, x^3, …, x^13
ERF_DEN = (
    -1.42647390514189e-02,
    -7.37332916720468e-03,
    -1.68282697438203e-03,
    -2.13374055278905e-04,
    -1.45660718464996e-05,
)  # x^0, x^2, …, x^8
ERF_CLAMP = 4.0
# GELU(x) = x (0.5 + 0.5 erf(x / sqrt 2)): with u = x / sqrt 2, u^2 = x^2 / 2, so the
# coefficients of x^(2j) get (1/2)^j, and the numerator also 0.5 / sqrt 2.
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = (_F(c * 0.5**j * 0.5 / math.sqrt(2.0)) for j, c in enumerate(ERF_NUM))
_Q0, _Q1, _Q2, _Q3, _Q4 = (_F(c * 0.5**j) for j, c in enumerate(ERF_DEN))
_GELU_CLAMP = _F(ERF_CLAMP * math.sqrt(2.0))
_HALF = _F(0.5)
_ZERO = _F(0.0)
_ONE = _F(1.0)

# exp(x) = 2^(x log2 e) = 2^n 2^f with n = round(x log2 e), |f| <= 1/2; 2^f by its Taylor
# series in f ln 2 to degree 7 (truncation < 5e-9 relative), 2^n built in the float's exponent
# bits. Softmax only exponentiates x - max <= 0; below 2^-126 the result is flushed to 0, so
# a padded key (bias -1e9) gets exactly 0 weight.
_LOG2E = _F(1.0 / math.log(2.0))
_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7 = (_F(math.log(2.0) ** k / math.factorial(k)) for k in range(8))
_EXP2_MIN = _F(-126.0)
_BIAS_EXP, _MANTISSA, _ZERO_BITS = np.int32(127), np.int32(23), np.int32(0)  # float32 exponent field


def _gelu_rows(y: np.ndarray, bias: np.ndarray) -> None:
    """y (N, F) ← GELU(y + bias); bias (F,)."""
    for i in range(y.shape[0]):
        row = y[i]
        for j in range(row.shape[0]):
            x = row[j] + bias[j]
            u = min(max(x, -_GELU_CLAMP), _GELU_CLAMP)
            q = u * u
            p = ((((((_P6 * q + _P5) * q + _P4) * q + _P3) * q + _P2) * q + _P1) * q + _P0) * u
            d = (((_Q4 * q + _Q3) * q + _Q2) * q + _Q1) * q + _Q0
            row[j] = x * (_HALF + p / d)  # p / d = 0.5 erf(x / sqrt 2)


def _relu_rows(y: np.ndarray, bias: np.ndarray) -> None:
    """y (N, F) ← max(y + bias, 0); bias (F,)."""
    for i in range(y.shape[0]):
        row = y[i]
        for j in range(row.shape[0]):
            row[j] = max(row[j] + bias[j], _ZERO)


def _add_rows(y: np.ndarray, bias: np.ndarray) -> None:
    """y (N, F) += bias (F,)."""
    for i in range(y.shape[0]):
        row = y[i]
        for j in range(row.shape[0]):
            row[j] += bias[j]


def _layernorm_rows(
    y: np.ndarray, bias: np.ndarray, residual: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float
) -> None:
    """y (N, C) ← LayerNorm(y + bias + residual) · gamma + beta; residual (N, C) or (0, C) for none.

    Two-pass statistics (mean, then the mean of squared deviations) on the row while it is in
    L1: the one-pass E[x²] - E[x]² form cancels badly in float32.
    """
    c = y.shape[1]
    inv_c = _ONE / _F(c)
    has_residual = residual.shape[0] > 0
    for i in range(y.shape[0]):
        row = y[i]
        if has_residual:
            res = residual[i]
            for j in range(c):
                row[j] += res[j]
        s = _ZERO
        for j in range(c):
            v = row[j] + bias[j]
            row[j] = v
            s += v
        mean = s * inv_c
        s2 = _ZERO
        for j in range(c):
            d = row[j] - mean
            s2 += d * d
        rstd = _ONE / np.sqrt(s2 * inv_c + eps)
        for j in range(c):
            row[j] = (row[j] - mean) * rstd * gamma[j] + beta[j]


@njit(fastmath=OPTIONS["fastmath"], inline="always")
def _row_max(row: np.ndarray) -> float:
    """max(row) over 8 independent running maxima: one chain would wait ~3 cycles per element
    (LLVM does not vectorize a float max reduction without ``nnan``)."""
    t = row.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row[0]
    j = 0
    while j + 8 <= t:
        m0 = max(m0, row[j])
        m1 = max(m1, row[j + 1])
        m2 = max(m2, row[j + 2])
        m3 = max(m3, row[j + 3])
        m4 = max(m4, row[j + 4])
        m5 = max(m5, row[j + 5])
        m6 = max(m6, row[j + 6])
        m7 = max(m7, row[j + 7])
        j += 8
    while j < t:
        m0 = max(m0, row[j])
        j += 1
    m: float = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    return m


def _softmax_rows(y: np.ndarray, bias: np.ndarray, rows_per_bias: int, scale: float, bits: np.ndarray) -> None:
    """y (R, T) ← softmax(y · scale + bias[r // rows_per_bias]) per row.

    bias (R / rows_per_bias, T) additive mask (a zero row for none: one branch-free pass in L1,
    and a smaller kernel to compile); bits (T,) int32 scratch (the 2^n factors are assembled
    there as float bit patterns and read back through a float view).
    """
    t = y.shape[1]
    two_n = bits.view(np.float32)
    for i in range(y.shape[0]):
        row = y[i]
        b = bias[i // rows_per_bias]
        for j in range(t):
            row[j] = row[j] * scale + b[j]
        m = _row_max(row)
        for j in range(t):
            z = max((row[j] - m) * _LOG2E, _EXP2_MIN)  # (-126, 0]
            n = np.floor(z + _HALF)
            f = z - n
            row[j] = ((((((_E7 * f + _E6) * f + _E5) * f + _E4) * f + _E3) * f + _E2) * f + _E1) * f + _E0
            # 2^n as float bits; 0 (the float 0.0) when the value underflows float32's normals.
            bits[j] = (np.int32(n) + _BIAS_EXP) << _MANTISSA if z > _EXP2_MIN else _ZERO_BITS
        s = _ZERO
        for j in range(t):
            e = row[j] * two_n[j]
            row[j] = e
            s += e
        inv = _ONE / s
        for j in range(t):
            row[j] *= inv


class LazyKernel:
    """A kernel compiled by numba's JIT for its one explicit signature on first call (thread-safe)."""

    def __init__(self, py_func: Callable[..., None], signature: Any):
        self.py_func = py_func
        self.signature = signature
        self.name = py_func.__name__.lstrip("_")
        self.compile_seconds = 0.0
        self._compiled: Callable[..., None] | None = None
        self._lock = threading.Lock()

    def compile(self) -> Callable[..., None]:
        with self._lock:
            if self._compiled is None:
                t0 = time.perf_counter()
                self._compiled = njit(self.signature, cache=True, **OPTIONS)(self.py_func)
                self.compile_seconds = time.perf_counter() - t0
        return self._compiled

    def __call__(self, *args: object) -> None:
        return (self._compiled or self.compile())(*args)
