"""Int8 ONNX: the integer sub-graph of a quantized Linear, and int8 embedding tables.

A quantized Linear (``openhood.engine.quant.linear.Int8Linear``) exports itself through
``emit_int8_matmul``, per activation mode:

- ``static``:  ``QuantizeLinear(x, s, zp)`` with the calibrated range → ``MatMulInteger`` →
  ``Cast`` → ``Mul(s · w_scale)``;
- ``dynamic``: ``DynamicQuantizeLinear(x)`` (per-tensor range computed at run time) →
  ``MatMulInteger`` → ``Cast`` → ``Mul(x_scale · w_scale)``.

ONNX Runtime fuses these chains into its ``MatMulIntegerToFloat`` / ``DynamicQuantizeMatMul``
kernels. We emit this integer-operator ("QOperator") form rather than QDQ pairs because it pins
down which integer kernel runs, and on CPUs without VNNI (AVX2 only, like this project's
machine) that matters: the MLAS u8×s8 AVX2 kernel sums pairs with ``vpmaddubsw``, whose int16
results saturate for full 8-bit weights (measured: 34% relative error on a 1536-deep product).
So weights are stored as *uint8 codes with zero point 128* — the same symmetric int8 codes
shifted by 128, identical numbers — which selects the exact u8×u8 kernel. ``weight_encoding=
"s8"`` keeps signed codes (exact with VNNI, or with 7-bit weights).

The token embedding table (30% of all-MiniLM's weights) is stored int8 per row and
dequantized after the lookup (``Gather`` codes → ``Cast`` → ``Mul(Gather(row scales))``), so
only the looked-up rows are ever widened: ``quantize_embedding_tables`` rewrites an exported
graph that way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EMBEDDING_MIN_ROWS = 1000  # a Gather table at least this tall is a vocabulary, not e.g. token types


def weight_codes(codes: np.ndarray, encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """int8 (out, in) codes → ((in, out) codes for MatMulInteger's B input, their zero point)."""
    b = np.ascontiguousarray(codes.T)  # (in, out)
    if encoding == "u8":
        return (b.astype(np.int16) + 128).astype(np.uint8), np.array(128, dtype=np.uint8)
    if encoding == "s8":
        return b.astype(np.int8), np.array(0, dtype=np.int8)
    raise ValueError(f"weight_encoding must be 'u8' or 's8', got {encoding!r}")


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
    weight_encoding: str = "u8",
) -> str:
    """Emit ``x (.., in) @ dequant(codes)ᵀ`` as integer ops; returns the float output's name.

    ``const(name, array) -> name`` adds an initializer; ``node(op, inputs, outputs, name,
    **attrs)`` adds a node. ``codes`` (out, in) int8, ``scale`` (out,) float32.
    """
    wq, wzp = weight_codes(codes, weight_encoding)
    wq_name = const(f"{prefix}.weight_q", wq)
    wzp_name = const(f"{prefix}.weight_zero_point", wzp)
    w_scale = scale.astype(np.float32)
    if mode == "static":
        if input_scale is None or input_zero_point is None:
            raise ValueError(f"layer {prefix}: static mode needs a calibrated input_scale and input_zero_point")
        xs = const(f"{prefix}.input_scale", np.array(input_scale, dtype=np.float32))
        xzp = const(f"{prefix}.input_zero_point", np.array(input_zero_point, dtype=np.uint8))
        node("QuantizeLinear", [x, xs, xzp], [f"{prefix}.x_q"], name=f"{prefix}.quantize")
        rescale = const(f"{prefix}.rescale", (np.float32(input_scale) * w_scale).astype(np.float32))  # (out,)
    elif mode == "dynamic":
        xs, xzp = f"{prefix}.x_scale", f"{prefix}.x_zero_point"
        node("DynamicQuantizeLinear", [x], [f"{prefix}.x_q", xs, xzp], name=f"{prefix}.quantize")
        node("Mul", [xs, const(f"{prefix}.weight_scale", w_scale)], [f"{prefix}.rescale"], name=f"{prefix}.rescale")
        rescale = f"{prefix}.rescale"
    else:
        raise ValueError(f"layer {prefix}: unknown int8 mode {mode!r} (static or dynamic)")
    node("MatMulInteger", [f"{prefix}.x_q", wq_name, xzp, wzp_name], [f"{prefix}.acc"], name=f"{prefix}.matmul_integer")
    node("Cast", [f"{prefix}.acc"], [f"{prefix}.acc_f"], name=f"{prefix}.cast", to=TensorProto.FLOAT)
    node("Mul", [f"{prefix}.acc_f", rescale], [f"{prefix}.y"], name=f"{prefix}.dequant")
    return f"{prefix}.y"


@dataclass(frozen=True)
class EmbeddingSite:
    """One ``Gather(table, ids)`` on a vocabulary-sized 2-D float initializer."""

    node: str
    table: str
    indices: str
    output: str


def embedding_sites(model: onnx.ModelProto) -> list[EmbeddingSite]:
    """Every axis-0 Gather on a float 2-D initializer with at least ``EMBEDDING_MIN_ROWS`` rows."""
    inits = {t.name: t for t in model.graph.initializer}
    sites = []
    for i, node in enumerate(model.graph.node):
        if node.op_type != "Gather" or node.input[0] not in inits:
            continue
        t = inits[node.input[0]]
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if len(t.dims) == 2 and t.dims[0] >= EMBEDDING_MIN_ROWS and axis == 0 and t.data_type == TensorProto.FLOAT:
            sites.append(EmbeddingSite(node.name or f"Gather_{i}", t.name, node.input[1], node.output[0]))
    return sites


def quantize_embedding_tables(model: onnx.ModelProto, tables: dict[str, tuple[np.ndarray, np.ndarray]]) -> onnx.ModelProto:
    """A copy of ``model`` whose listed tables (initializer name → (int8 codes (V, D), row
    scales (V,))) are stored int8 and dequantized after the lookup."""
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never mutate the caller's
    sites = {s.table: s for s in embedding_sites(model) if s.table in tables}
    missing = set(tables) - set(sites)
    if missing:
        raise ValueError(f"no vocabulary Gather reads {sorted(missing)}")
    graph = model.graph
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        site = sites.get(node.input[0]) if node.op_type == "Gather" else None
        if site is None:
            nodes.append(node)
            continue
        codes, scale = tables[site.table]
        p = site.table
        graph.initializer.append(numpy_helper.from_array(codes.astype(np.int8), f"{p}.int8"))
        graph.initializer.append(numpy_helper.from_array(scale.astype(np.float32).reshape(-1, 1), f"{p}.row_scale"))  # (V, 1)
        nodes += [
            helper.make_node("Gather", [f"{p}.int8", site.indices], [f"{p}.codes"], name=f"{p}.gather_codes"),
            helper.make_node("Cast", [f"{p}.codes"], [f"{p}.codes_f"], name=f"{p}.cast", to=TensorProto.FLOAT),
            helper.make_node("Gather", [f"{p}.row_scale", site.indices], [f"{p}.scales"], name=f"{p}.gather_scales"),
            helper.make_node("Mul", [f"{p}.codes_f", f"{p}.scales"], [site.output], name=f"{p}.dequant"),
        ]
    keep = [t for t in graph.initializer if t.name not in sites]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return model
