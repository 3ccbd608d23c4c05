"""Compiled (numba) kernels of the CNN ops: im2col, depthwise convolution, the conv epilogue.

All arrays are float32, C-contiguous, channels last: activations (N, H, W, C). Each kernel
takes a row range ``[r0, r1)`` over the N*OH output rows so ``RowSplitter`` can hand one range
to each thread (the kernels release the GIL).

- ``im2col_rows``: a block of output rows of (N, H, W, C) → its (rows*OW, KH*KW*C) patches,
  zeros where the window hangs over the padding, for the GEMM of a k×k convolution (the stem).
- ``depthwise``: one k×k filter per channel. With channels last the innermost loop runs over
  C contiguous floats of input, filter and output at once, so LLVM vectorizes it (8 lanes on
  AVX2) and each input row is read KH times from cache; im2col would copy every input value
  KH*KW times (9x / 25x the activation) to feed a GEMM whose "K" is a single channel.
  The bias (a folded BatchNorm's shift) and the clip of ReLU/ReLU6 run on the output row
  while it is still in L1/L2.
- ``bias_act_rows``: y (M, C) ← clip(y + bias [+ residual], lo, hi), the epilogue of a GEMM:
  ReLU is (0, +inf), ReLU6 is (0, 6), none is (-inf, +inf); residual has 0 rows when absent.

Trade-off: one compile per kernel at first use (about a second each, once per process).
"""

from __future__ import annotations

import numpy as np
from numba import types

from openhood.engine.kernels import LazyKernel


def _im2col_rows(x: np.ndarray, cols: np.ndarray, out_h: int, out_w: int, stride: int, pad_top: int, pad_left: int,
                 kh: int, kw: int, r0: int, r1: int) -> None:
    """Patches of output image rows [r0, r1) (over N*OH) → cols ((r1 - r0) * OW, KH*KW*C)."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    for r in range(r0, r1):
        n = r // out_h
        i = r - n * out_h
        for j in range(out_w):
            row = cols[(r - r0) * out_w + j]
            k = 0
            for a in range(kh):
                ih = i * stride - pad_top + a
                for b in range(kw):
                    iw = j * stride - pad_left + b
                    if 0 <= ih < h and 0 <= iw < w:
                        src = x[n, ih, iw]
                        for ch in range(c):
                            row[k + ch] = src[ch]
                    else:
                        for ch in range(c):
                            row[k + ch] = 0.0
                    k += c


def _depthwise(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray, stride: int, pad_top: int,
               pad_left: int, lo: float, hi: float, r0: int, r1: int) -> None:
    """x (N, H, W, C), weight (KH, KW, C), bias (C,) → out (N, OH, OW, C), clipped to [lo, hi]."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    out_h, out_w = out.shape[1], out.shape[2]
    kh, kw = weight.shape[0], weight.shape[1]
    for r in range(r0, r1):
        n = r // out_h
        i = r - n * out_h
        o = out[n, i]  # (OW, C): the accumulator, kept in cache for the whole window
        for j in range(out_w):
            for ch in range(c):
                o[j, ch] = bias[ch]
        for a in range(kh):
            ih = i * stride - pad_top + a
            if ih < 0 or ih >= h:
                continue  # padding row: contributes zeros
            xr = x[n, ih]  # (W, C)
            wa = weight[a]  # (KW, C)
            for j in range(out_w):
                oj = o[j]
                for b in range(kw):
                    iw = j * stride - pad_left + b
                    if iw < 0 or iw >= w:
                        continue
                    xv = xr[iw]
                    wv = wa[b]
                    for ch in range(c):
                        oj[ch] += xv[ch] * wv[ch]
        for j in range(out_w):
            oj = o[j]
            for ch in range(c):
                oj[ch] = min(max(oj[ch], lo), hi)


def _bias_act_rows(y: np.ndarray, bias: np.ndarray, residual: np.ndarray, lo: float, hi: float) -> None:
    """y (M, C) ← clip(y + bias + residual, lo, hi); residual (M, C) or (0, 0) for none."""
    with_residual = residual.shape[0] > 0
    for i in range(y.shape[0]):
        row = y[i]
        if with_residual:
            res = residual[i]
            for j in range(row.shape[0]):
                row[j] = min(max(row[j] + bias[j] + res[j], lo), hi)
        else:
            for j in range(row.shape[0]):
                row[j] = min(max(row[j] + bias[j], lo), hi)


_IN4 = types.Array(types.float32, 4, "C", readonly=True)
_IN3 = types.Array(types.float32, 3, "C", readonly=True)
_IN2 = types.Array(types.float32, 2, "C", readonly=True)
_IN1 = types.Array(types.float32, 1, "C", readonly=True)
_I = types.int64
_F = types.float32

im2col_rows = LazyKernel(_im2col_rows, types.void(_IN4, types.float32[:, ::1], _I, _I, _I, _I, _I, _I, _I, _I, _I))
depthwise = LazyKernel(_depthwise, types.void(_IN4, _IN3, _IN1, types.float32[:, :, :, ::1], _I, _I, _I, _F, _F, _I, _I))
bias_act_rows = LazyKernel(_bias_act_rows, types.void(types.float32[:, ::1], _IN1, _IN2, _F, _F))
KERNELS = (im2col_rows, depthwise, bias_act_rows)
