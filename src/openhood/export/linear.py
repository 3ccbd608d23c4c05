"""ONNX for each kind of engine ``Linear``: the product ``x @ W`` without its bias.

The engine's layers know nothing of ONNX (export depends on the engine, never the reverse),
so the exporter picks the sub-graph by the layer's class: float ``Linear`` → ``MatMul(x, W)``
with W an (in, out) initializer ``<prefix>.weight``; ``Fp16Linear`` → its float16 weight behind
a ``Cast`` that ONNX Runtime constant-folds at session start; ``Int8Linear`` → the integer
sub-graph of ``openhood.export.qdq`` (with a ``Mul`` by 1/s first when it carries SmoothQuant
factors). The trade-off: a new Linear kind needs a branch here, and an unknown one is refused
with ``NotImplementedError`` instead of exported as something it is not.
"""

from __future__ import annotations

from typing import Any

from onnx import TensorProto, helper

from openhood.engine.kernels.linear import Linear
from openhood.engine.quant.linear import Fp16Linear, Int8Linear, ObservingLinear
from openhood.export.qdq import emit_int8_matmul


def emit_matmul(builder, lin: object, x: str, prefix: str) -> str:
    """Emit ``x (.., in) @ W (in, out)`` for ``lin`` into ``builder``; returns the output's name."""
    if isinstance(lin, ObservingLinear):
        lin = lin.inner  # calibration wrapper: export what it wraps
    if isinstance(lin, Int8Linear):
        return _int8(builder, lin, x, prefix)
    if isinstance(lin, Fp16Linear):
        w = builder.initializer(f"{prefix}.weight_fp16", lin.weight_fp16)
        w = builder.node("Cast", [w], name=f"{prefix}.widen", to=TensorProto.FLOAT)
        return builder.node("MatMul", [x, w], name=f"{prefix}.matmul")
    if isinstance(lin, Linear):
        w = builder.initializer(f"{prefix}.weight", lin.weight)
        return builder.node("MatMul", [x, w], name=f"{prefix}.matmul")
    raise NotImplementedError(
        f"{type(lin).__name__} of node {prefix!r} is not a Linear kind the exporter knows: cannot export it"
    )


def _int8(builder, lin: Int8Linear, x: str, prefix: str) -> str:
    def node(op: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any) -> None:
        builder.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))

    if lin.inv_smooth is not None:  # one elementwise pass over (M, in) before quantizing
        inv = builder.initializer(f"{prefix}.inv_smooth", lin.inv_smooth)
        x = builder.node("Mul", [x, inv], name=f"{prefix}.smooth")
    return emit_int8_matmul(
        builder.initializer,
        node,
        x,
        prefix,
        lin.codes,
        lin.scale,
        lin.mode,
        lin.input_scale,
        lin.input_zero_point,
        lin.weight_encoding,
    )
