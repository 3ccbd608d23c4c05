"""Int8 ONNX: the integer sub-graph of a quantized Linear, and int8 embedding tables.

A quantized Linear (``openhood.engine.quant.linear.Int8Linear``) is exported (``export.linear``) through
``emit_int8_matmul``, per activation mode, in the two shapes ONNX Runtime's optimizer turns
into *one* fused integer kernel each (checked on the optimized graph, and tested):

- ``static``:  QDQ — ``QuantizeLinear(x, s, zp)`` → ``DequantizeLinear`` → ``MatMul`` with the
  weight behind ``DequantizeLinear(codes, w_scale, axis=1)`` → fused into
  ``QuantizeLinear`` + ``MatMulIntegerToFloat`` (rescale inside the kernel). The integer-operator
  chain ``QuantizeLinear → MatMulInteger → Cast → Mul`` is *not* fused for a constant range
  (ORT folds the scale product first, then its pattern no longer matches): three extra passes
  over the output, measured 1.29× vs 1.32× fp32 for the same plan.
- ``dynamic``: ``DynamicQuantizeLinear(x)`` → ``MatMulInteger`` → ``Cast`` → ``Mul(Mul(x_scale,
  w_scale))`` → fused into ``DynamicQuantizeMatMul``.

Weight encoding, and why it matters on CPUs without VNNI (AVX2 only, like this project's
machine): MLAS's u8×s8 AVX2 kernel sums pairs with ``vpmaddubsw``, whose int16 results
saturate for full 8-bit weights (measured: 34% relative error on a 1536-deep product). So

- ``s8``: signed codes, used when every code is within [-63, 63] (7-bit weights, ORT's
  "reduce_range"): the fast u8×s8 kernel with no saturation (255·63·2 < 2¹⁵);
- ``u8``: full 8-bit codes shifted by 128, stored uint8 with zero point 128 — identical
  numbers — which selects the exact but ~8-10% slower u8×u8 kernel;
- ``auto`` (default) picks ``s8`` when the codes fit 7 bits, else ``u8``.

The token embedding table (52% of all-MiniLM's parameters: 11.7 M of 22.6 M) is stored int8 per row and
dequantized after the lookup (``Gather`` codes → ``Cast`` → ``Mul(Gather(row scales))``), so
only the looked-up rows are ever widened: ``emit_int8_gather``, which the exporter calls for an
``Embeddings`` node that carries int8 codes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto

S8_SAFE_QMAX = 63  # |codes| <= 63: u8 x s8 int16 pair sums cannot saturate (2 * 255 * 63 < 32768)


def resolve_encoding(codes: np.ndarray, encoding: str) -> str:
    """``auto`` → ``s8`` when the codes fit 7 bits (fast, exact on AVX2), else ``u8`` (exact).

    >>> resolve_encoding(np.array([[63, -5]], np.int8), "auto"), resolve_encoding(np.array([[127]], np.int8), "auto")
    ('s8', 'u8')
    """
    if encoding == "auto":
        return "s8" if int(np.max(np.abs(codes.astype(np.int16)), initial=0)) <= S8_SAFE_QMAX else "u8"
    if encoding not in ("u8", "s8"):
        raise ValueError(f"weight_encoding must be 'auto', 'u8' or 's8', got {encoding!r}")
    return encoding


def weight_codes(codes: np.ndarray, encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """int8 (out, in) codes → ((in, out) codes for the integer GEMM's B input, (out,) zero points)."""
    encoding = resolve_encoding(codes, encoding)
    b = np.ascontiguousarray(codes.T)  # (in, out)
    if encoding == "u8":
        return (b.astype(np.int16) + 128).astype(np.uint8), np.full(b.shape[1], 128, dtype=np.uint8)
    return b.astype(np.int8), np.zeros(b.shape[1], dtype=np.int8)


def emit_int8_matmul(
    const: Callable[[str, np.ndarray], str],
    node: Callable[..., None],
    x: str,
    prefix: str,
    codes: np.ndarray,
    scale: np.ndarray,
    mode: str,
    input_scale: float | None = None,
    input_zero_point: int | None = None,
    weight_encoding: str = "auto",
) -> str:
    """Emit ``x (.., in) @ dequant(codes)ᵀ`` as integer ops; returns the float output's name.

    ``const(name, array) -> name`` adds an initializer; ``node(op, inputs, outputs, name,
    **attrs)`` adds a node. ``codes`` (out, in) int8, ``scale`` (out,) float32.
    """
    wq, wzp = weight_codes(codes, weight_encoding)  # (in, out), (out,)
    wq_name = const(f"{prefix}.weight_q", wq)
    ws = const(f"{prefix}.weight_scale", scale.astype(np.float32))  # (out,)
    if mode == "static":
        if input_scale is None or input_zero_point is None:
            raise ValueError(f"layer {prefix}: static mode needs a calibrated input_scale and input_zero_point")
        xs = const(f"{prefix}.input_scale", np.array(input_scale, dtype=np.float32))
        xzp = const(f"{prefix}.input_zero_point", np.array(input_zero_point, dtype=np.uint8))
        wzp_name = const(f"{prefix}.weight_zero_point", wzp)  # per column, like the scale
        node("QuantizeLinear", [x, xs, xzp], [f"{prefix}.x_q"], name=f"{prefix}.quantize")
        node("DequantizeLinear", [f"{prefix}.x_q", xs, xzp], [f"{prefix}.x_dq"], name=f"{prefix}.dequantize")
        node(
            "DequantizeLinear", [wq_name, ws, wzp_name], [f"{prefix}.w_dq"], name=f"{prefix}.weight_dequantize", axis=1
        )
        node("MatMul", [f"{prefix}.x_dq", f"{prefix}.w_dq"], [f"{prefix}.y"], name=f"{prefix}.matmul")
        return f"{prefix}.y"
    if mode != "dynamic":
        raise ValueError(f"layer {prefix}: unknown int8 mode {mode!r} (static or dynamic)")
    wzp_name = const(f"{prefix}.weight_zero_point", wzp[0])  # scalar: all columns share it
    xs, xzp = f"{prefix}.x_scale", f"{prefix}.x_zero_point"
    node("DynamicQuantizeLinear", [x], [f"{prefix}.x_q", xs, xzp], name=f"{prefix}.quantize")
    node("Mul", [xs, ws], [f"{prefix}.rescale"], name=f"{prefix}.rescale")
    node("MatMulInteger", [f"{prefix}.x_q", wq_name, xzp, wzp_name], [f"{prefix}.acc"], name=f"{prefix}.matmul_integer")
    node("Cast", [f"{prefix}.acc"], [f"{prefix}.acc_f"], name=f"{prefix}.cast", to=TensorProto.FLOAT)
    node("Mul", [f"{prefix}.acc_f", f"{prefix}.rescale"], [f"{prefix}.y"], name=f"{prefix}.dequant")
    return f"{prefix}.y"


def emit_int8_gather(builder, prefix: str, codes: np.ndarray, scale: np.ndarray, ids: str) -> str:
    """``table[ids]`` for an int8 table stored per row: ``Gather`` the codes → ``Cast`` →
    ``Mul`` by the gathered row scales, so only looked-up rows are ever widened.
    ``codes`` (V, D) int8, ``scale`` (V,) float32; returns the (.., D) float output's name."""
    q = builder.node(
        "Gather", [builder.initializer(f"{prefix}.int8", codes.astype(np.int8)), ids], name=f"{prefix}.gather_codes"
    )
    q = builder.node("Cast", [q], name=f"{prefix}.cast", to=TensorProto.FLOAT)
    row_scale = builder.initializer(f"{prefix}.row_scale", scale.astype(np.float32).reshape(-1, 1))  # (V, 1)
    s = builder.node("Gather", [row_scale, ids], name=f"{prefix}.gather_scales")
    return builder.node("Mul", [q, s], name=f"{prefix}.dequant")
