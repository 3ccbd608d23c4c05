"""Quantization arithmetic: int8 weights per output channel, uint8 activations per tensor.

Weights are quantized *symmetrically* per output channel to the narrow range [-127, 127]: the
zero point is 0, so an int8 GEMM needs no weight-offset correction term, and one scale per
output row absorbs the very different row norms BERT weights have. Activations are quantized
*asymmetrically* per tensor to uint8 [0, 255]: post-GELU and post-LayerNorm activations are
skewed, so an offset buys almost a bit of resolution. The zero point is an integer, which makes
real 0.0 (padding, ReLU/GELU floors) map to an exact code and back to exactly 0.0.

Each fast (vectorized) function has a naive loop reference beside it (``*_naive``); the tests
check one against the other. The int8 matmul emulation is the arithmetic ONNX Runtime's
``MatMulInteger`` performs, written out in int32 so the error analysis can be checked here.
"""

from __future__ import annotations

import numpy as np

INT8_MAX = 127  # narrow symmetric range: -127..127, so -w and w quantize to opposite codes
UINT8_MAX = 255

# An activation (scale, zero point): plain numbers from a saved plan, NumPy scalars from
# ``activation_qparams``.
Scale = float | np.float32
ZeroPoint = int | np.uint8


def weight_scales(w: np.ndarray, axis: int = 0, qmax: int = INT8_MAX) -> np.ndarray:
    """Per-channel symmetric scales: ``max|w|`` over every axis except ``axis``, over ``qmax``.

    ``w`` (out, in) with ``axis=0`` → scales (out,). An all-zero channel gets scale 1.0 so that
    dividing by it is safe and its codes are all 0 (it dequantizes back to exactly 0).
    """
    w = np.asarray(w, dtype=np.float32)
    other = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    amax = np.max(np.abs(w), axis=other)
    return np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)


def quantize_weight(w: np.ndarray, axis: int = 0, qmax: int = INT8_MAX) -> tuple[np.ndarray, np.ndarray]:
    """``w`` float → (int8 codes shaped like ``w``, float32 scales along ``axis``).

    ``qmax=63`` gives 7-bit weights (ORT's "reduce_range"), which avoids int16 saturation in
    u8×s8 kernels on CPUs without VNNI; 127 is the default.

    >>> codes, scales = quantize_weight(np.array([[0.5, -1.0], [2.0, 0.25]]), axis=0)
    >>> codes.tolist(), (scales * 127).round(6).tolist()
    ([[64, -127], [127, 16]], [1.0, 2.0])
    """
    w = np.asarray(w, dtype=np.float32)
    scale = weight_scales(w, axis, qmax)
    shape = [1] * w.ndim
    shape[axis % w.ndim] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, scale


def quantize_weight_naive(w: np.ndarray, qmax: int = INT8_MAX) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``quantize_weight(w, axis=0)`` on a 2-D ``w``: one Python loop per row."""
    w = np.asarray(w, dtype=np.float32)
    q = np.zeros(w.shape, dtype=np.int8)
    scales = np.zeros(w.shape[0], dtype=np.float32)
    for r in range(w.shape[0]):
        amax = float(np.max(np.abs(w[r]))) if w.shape[1] else 0.0
        s = np.float32(amax / qmax) if amax > 0 else np.float32(1.0)
        scales[r] = s
        for c in range(w.shape[1]):
            q[r, c] = int(max(-qmax, min(qmax, round(float(w[r, c] / s)))))
    return q, scales


def dequantize_weight(q: np.ndarray, scale: np.ndarray, axis: int = 0) -> np.ndarray:
    """int8 codes × per-channel scale → float32, same shape as ``q``."""
    shape = [1] * q.ndim
    shape[axis % q.ndim] = -1
    return q.astype(np.float32) * scale.astype(np.float32).reshape(shape)


def activation_qparams(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """Asymmetric uint8 (scale, zero_point) covering ``[lo, hi]`` widened to include 0.

    Widening to include 0 and rounding the zero point to an integer code is what makes 0.0
    exactly representable.

    >>> scale, zero_point = activation_qparams(-1.0, 3.0)
    >>> round(float(scale) * 255, 5), int(zero_point)
    (4.0, 64)
    >>> quantize_activation(np.array([-1.0, 0.0, 3.0]), scale, zero_point).tolist()
    [0, 64, 255]
    """
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"activation range must be finite, got [{lo}, {hi}]")
    if hi == lo:  # an all-zero tensor: any scale works, pick one that round-trips
        return np.float32(1.0), np.uint8(0)
    scale = np.float32((hi - lo) / UINT8_MAX)
    zero_point = np.uint8(np.clip(np.rint(-lo / scale), 0, UINT8_MAX))
    return scale, zero_point


def quantize_activation(x: np.ndarray, scale: Scale, zero_point: ZeroPoint) -> np.ndarray:
    """float → uint8 codes; values outside the calibrated range clip to 0 or 255."""
    q = np.rint(np.asarray(x, dtype=np.float32) / np.float32(scale)) + np.float32(zero_point)
    codes: np.ndarray = np.clip(q, 0, UINT8_MAX).astype(np.uint8)
    return codes


def quantize_activation_naive(x: np.ndarray, scale: Scale, zero_point: ZeroPoint) -> np.ndarray:
    """Reference for ``quantize_activation``: one element at a time."""
    flat = np.asarray(x, dtype=np.float32).ravel()
    out = np.zeros(flat.shape, dtype=np.uint8)
    for i, v in enumerate(flat):
        code = round(float(np.float32(v) / np.float32(scale))) + int(zero_point)
        out[i] = max(0, min(UINT8_MAX, code))
    return out.reshape(np.shape(x))


def dequantize_activation(q: np.ndarray, scale: Scale, zero_point: ZeroPoint) -> np.ndarray:
    """uint8 codes → float32."""
    return (q.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def dynamic_qparams(x: np.ndarray) -> tuple[np.float32, np.uint8]:
    """Per-tensor range of ``x`` itself, as ONNX ``DynamicQuantizeLinear`` computes at run time."""
    return activation_qparams(float(np.min(x)), float(np.max(x)))


def int8_matmul(xq: np.ndarray, x_scale: float, x_zp: int, wq: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """Integer GEMM emulation: uint8 x (M, K) times int8 wᵀ (N, K) → float32 (M, N).

    Accumulates ``(xq - zp) · wq`` in int32 exactly as ``MatMulInteger`` does, then rescales
    once per output column by ``x_scale * w_scale[n]``.
    """
    acc = (xq.astype(np.int32) - np.int32(x_zp)) @ wq.astype(np.int32).T  # (M, N) int32
    return acc.astype(np.float32) * (np.float32(x_scale) * w_scale.astype(np.float32))[None, :]


def int8_matmul_naive(xq: np.ndarray, x_scale: float, x_zp: int, wq: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """Reference for ``int8_matmul``: explicit triple loop with Python ints (no overflow)."""
    m, k = xq.shape
    n = wq.shape[0]
    out = np.zeros((m, n), dtype=np.float32)
    for i in range(m):
        for j in range(n):
            acc = sum((int(xq[i, t]) - int(x_zp)) * int(wq[j, t]) for t in range(k))
            out[i, j] = np.float32(acc) * np.float32(x_scale) * np.float32(w_scale[j])
    return out


def fake_quantize_activation(x: np.ndarray, scale: Scale, zero_point: ZeroPoint) -> np.ndarray:
    """quantize → dequantize in one step: the value an int8 kernel effectively sees."""
    return dequantize_activation(quantize_activation(x, scale, zero_point), scale, zero_point)


def smoothing_factors(act_absmax: np.ndarray, weight: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's per-input-channel factors s (in,) for ``x (.., in) @ weight (in, out)``.

    ``s_j = max|x_j|**alpha / max_k|w_jk|**(1 - alpha)``; the layer then computes
    ``(x / s) @ (s[:, None] * weight)`` — the same product — with an activation whose outlier
    channels are shrunk and a weight that absorbed them, so one per-tensor activation scale
    fits every channel better. ``alpha`` in (0, 1]: 0.5 splits the range evenly (both sides end
    with ``sqrt(max|x_j| max|w_j|)`` per channel). Channels never seen non-zero keep s = 1.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"smoothing alpha must be in (0, 1], got {alpha}")
    a = np.asarray(act_absmax, dtype=np.float64)  # (in,)
    w = np.max(np.abs(np.asarray(weight, dtype=np.float64)), axis=1)  # (in,)
    if a.shape != w.shape:
        raise ValueError(f"activation stats have {a.shape[0]} channels, the weight has {w.shape[0]} inputs")
    ok = (a > 0) & (w > 0)
    s = np.ones_like(a)
    s[ok] = a[ok] ** alpha / w[ok] ** (1.0 - alpha)
    return np.clip(s, 1e-4, 1e4).astype(np.float32)


def smoothing_factors_naive(act_absmax: np.ndarray, weight: np.ndarray, alpha: float) -> np.ndarray:
    """Reference for ``smoothing_factors``: one channel at a time."""
    out = []
    for j in range(len(act_absmax)):
        a = float(act_absmax[j])
        w = max(abs(float(v)) for v in weight[j])
        s = a**alpha / w ** (1.0 - alpha) if a > 0 and w > 0 else 1.0
        out.append(min(max(s, 1e-4), 1e4))
    return np.array(out, dtype=np.float32)
