"""Drop-in replacements for the engine's ``Linear``: int8, fp16, and a calibration observer.

They implement ``openhood.engine.kernels.linear.Linear``'s contract (``in_features``, ``out_features``,
``bias``, ``matmul``, ``forward``, ``flops``, ``nbytes``) so
``Graph.replace_linear`` swaps them in by name and every fused epilogue keeps working.
They subclass it for the shape, ``forward`` and ``flops`` logic but set their own
attributes instead of calling its ``__init__`` (their weights are not plain fp32 inputs).

``Int8Linear`` holds int8 codes (out, in) with per-output-channel scales and, for static
layers, the calibrated uint8 activation (scale, zero point). It runs two ways:

- **NumPy engine: weight-only dequantization.** The codes are dequantized once at load to an
  (in, out) float32 matrix and ``matmul`` is a plain sgemm. NumPy has no int8 GEMM: an int32
  ``np.matmul`` is a non-BLAS loop ~10-50x slower than sgemm, so emulating the integer product
  would make int8 *slower*. The accuracy is that of int8 weights with fp32 activations; the
  speed is fp32's; the gain is 4x smaller files.
- **SmoothQuant factors** (optional ``smooth`` s (in,)): the codes quantize ``W·diag(s)`` and
  the integer kernel gets ``x / s`` (an ONNX ``Mul`` before quantizing), which moves outlier
  activation channels into the weight. The NumPy weight-only path folds ``1/s`` back into its
  dequantized weight at load, so it costs nothing there.
- **Emulation** (``emulate=True``, used by the sensitivity pass): also quantize→dequantize the
  activation (calibrated range, or the tensor's own range for ``dynamic``), which reproduces
  ONNX Runtime's exact u8×u8 integer arithmetic up to float rounding — so layer errors can be
  measured in NumPy, with no ONNX session per trial.
- **ONNX export** (``openhood.export.linear``): the integer sub-graph of ``openhood.export.qdq``, which
  ONNX Runtime fuses into its int8 kernels (``weight_encoding="auto"``: 7-bit codes go to the
  fast u8×s8 kernel, 8-bit codes to the exact u8×u8 one).

``Fp16Linear`` stores float16 weights. Neither runtime computes faster in fp16 on this CPU
(AVX2 has no fp16 arithmetic; ORT's fp16 MatMul measured 2x slower than fp32 here), so it is a
*storage* precision: weights are widened to fp32 once at load (NumPy) or by a ``Cast`` that ONNX
Runtime constant-folds at session start.
"""

from __future__ import annotations

import numpy as np

from openhood.engine.kernels.linear import Linear
from openhood.engine.quant.observers import Watcher
from openhood.engine.quant.ops import dequantize_weight, dynamic_qparams, fake_quantize_activation


class Int8Linear(Linear):
    """int8 weights per output channel; activations static (calibrated), dynamic, or fp32."""

    precision = "int8"

    def __init__(
        self,
        codes: np.ndarray,
        scale: np.ndarray,
        bias: np.ndarray | None,
        mode: str = "dynamic",
        input_scale: float | None = None,
        input_zero_point: int | None = None,
        emulate: bool = False,
        weight_encoding: str = "auto",
        smooth: np.ndarray | None = None,
    ):
        if codes.dtype != np.int8 or codes.ndim != 2 or scale.shape != (codes.shape[0],):
            raise ValueError(
                f"expected int8 codes (out, in) and scales (out,), got {codes.dtype} {codes.shape} / {scale.shape}"
            )
        if mode not in ("static", "dynamic"):
            raise ValueError(f"Int8Linear mode must be static or dynamic, got {mode!r}")
        if mode == "static" and (input_scale is None or input_zero_point is None):
            raise ValueError("a static Int8Linear needs input_scale and input_zero_point from calibration")
        self.codes, self.scale, self.bias = codes, scale.astype(np.float32), bias
        self.mode, self.input_scale, self.input_zero_point = mode, input_scale, input_zero_point
        self.emulate, self.weight_encoding = emulate, weight_encoding
        if smooth is not None and np.shape(smooth) != (codes.shape[1],):
            raise ValueError(f"smoothing factors must be ({codes.shape[1]},), got {np.shape(smooth)}")
        # With SmoothQuant factors s (in,), the codes hold W·diag(s) and the int8 kernel sees x / s.
        self.smooth: np.ndarray | None = None
        self.inv_smooth: np.ndarray | None = None
        w = dequantize_weight(codes, self.scale, axis=0).T  # (in, out): the (smoothed) weight the kernel uses
        if smooth is None:
            self.weight = np.ascontiguousarray(w)
        else:
            self.smooth = np.asarray(smooth, dtype=np.float32)
            self.inv_smooth = (1.0 / self.smooth).astype(np.float32)
            # Weight-only NumPy path: fold 1/s back into the weight once, so x needs no extra pass.
            self.weight = np.ascontiguousarray(w * self.inv_smooth[:, None])
        # Emulation multiplies by the smoothed weight itself; only it keeps that second copy.
        self.kernel_weight = np.ascontiguousarray(w) if emulate and smooth is not None else self.weight

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if not self.emulate:
            return np.matmul(x, self.weight, out=out)  # (M, in) @ (in, out)
        if self.inv_smooth is not None:
            x = x * self.inv_smooth  # (M, in)
        if self.mode == "static":
            assert self.input_scale is not None and self.input_zero_point is not None  # checked at construction
            x = fake_quantize_activation(x, self.input_scale, self.input_zero_point)
        else:
            x = fake_quantize_activation(x, *dynamic_qparams(x))
        return np.matmul(x, self.kernel_weight, out=out)

    def nbytes(self) -> int:
        extra = 0 if self.smooth is None else self.smooth.nbytes
        return self.codes.nbytes + self.scale.nbytes + extra + (0 if self.bias is None else self.bias.nbytes)


class Fp16Linear(Linear):
    """float16-stored weights, computed in float32 (see module docstring for why)."""

    precision = "fp16"

    def __init__(self, weight_fp16: np.ndarray, bias: np.ndarray | None):
        self.weight_fp16 = np.ascontiguousarray(weight_fp16, dtype=np.float16)  # (in, out)
        self.weight = self.weight_fp16.astype(np.float32)
        self.bias = bias

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.matmul(x, self.weight, out=out)

    def nbytes(self) -> int:
        return self.weight_fp16.nbytes + (0 if self.bias is None else self.bias.nbytes)


class ObservingLinear(Linear):
    """Wraps a float Linear and feeds every input it sees to a calibration observer."""

    precision = "fp32"

    def __init__(self, inner: Linear, observer: Watcher):
        self.inner, self.observer = inner, observer
        self.weight, self.bias = inner.weight, inner.bias

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        self.observer.update(x)  # (M, in) rows; calibration batches carry no padding rows
        y: np.ndarray = self.inner.matmul(x, out=out)
        return y
