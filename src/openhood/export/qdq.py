"""Rewrite an fp32 ONNX graph into its int8 form, layer by layer, following a quantization plan.

Input: any fp32 ONNX graph whose Linear layers are ``MatMul(x, W)`` with ``W`` a 2-D (in, out)
initializer (what our exporter and PyTorch exporters emit), and whose token embedding is a
``Gather`` on a 2-D table. Output, per Linear layer mode:

- ``static``:  ``QuantizeLinear(x, s, zp)`` with the calibrated range → ``MatMulInteger`` →
  ``Cast`` → ``Mul(s · w_scale)``.
- ``dynamic``: ``DynamicQuantizeLinear(x)`` (per-tensor range computed at run time) →
  ``MatMulInteger`` → ``Cast`` → ``Mul(x_scale · w_scale)``.
- ``fp32``:    the original ``MatMul``.

ONNX Runtime fuses these chains into its ``MatMulIntegerToFloat`` / ``DynamicQuantizeMatMul``
kernels. We emit the integer-operator ("QOperator") form rather than QDQ pairs because it pins
down exactly which integer kernel runs, and on CPUs without VNNI (AVX2 only) that matters: the
MLAS u8×s8 AVX2 kernel multiplies pairs with ``vpmaddubsw``, whose int16 sums saturate for
8-bit weights (measured: 34% relative error on a 1536-deep product). We therefore store weights
as *uint8 codes with zero point 128* (the same symmetric int8 codes shifted by 128: identical
numbers), which selects the exact u8×u8 kernel; ``weight_encoding="s8"`` keeps signed codes
for VNNI machines or 7-bit weights.

The token embedding table is stored int8 per row and dequantized after the lookup
(``Gather`` codes → ``Cast`` → ``Mul(Gather(row scales))``): only the looked-up rows are ever
converted, and the table is 30% of all-MiniLM's weights, so the size target needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODES = ("static", "dynamic", "fp32")
EMBEDDING_MIN_ROWS = 1000  # a Gather table at least this tall is a vocabulary, not e.g. token types


@dataclass(frozen=True)
class LinearSite:
    """One ``MatMul(x, W)`` with a constant weight: a quantizable Linear layer."""

    layer: str  # e.g. "layer.0.ffn.down": the weight's name without ".weight"
    node: str  # the MatMul node's name (unique after ``name_nodes``)
    activation: str  # the tensor x
    weight: str  # the initializer W, shape (in, out)
    output: str


@dataclass(frozen=True)
class EmbeddingSite:
    """One ``Gather(table, ids)`` on a vocabulary-sized 2-D initializer."""

    layer: str
    node: str
    table: str
    indices: str
    output: str


def layer_name(initializer: str) -> str:
    """``"layer.0.ffn.down.weight"`` → ``"layer.0.ffn.down"``; other names are kept."""
    return initializer[: -len(".weight")] if initializer.endswith(".weight") else initializer


def name_nodes(model: onnx.ModelProto) -> None:
    """Give every unnamed node a unique name (in place) so sites can refer to nodes."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}"
        seen.add(node.name)


def _initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def linear_sites(model: onnx.ModelProto) -> list[LinearSite]:
    """Every MatMul whose second input is a 2-D float initializer, in graph order."""
    name_nodes(model)
    inits = _initializers(model)
    sites = []
    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        w = inits[node.input[1]]
        if len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            continue
        sites.append(LinearSite(layer_name(w.name), node.name, node.input[0], w.name, node.output[0]))
    return sites


def embedding_sites(model: onnx.ModelProto) -> list[EmbeddingSite]:
    """Every Gather on a float 2-D initializer with at least ``EMBEDDING_MIN_ROWS`` rows."""
    name_nodes(model)
    inits = _initializers(model)
    sites = []
    for node in model.graph.node:
        if node.op_type != "Gather" or node.input[0] not in inits:
            continue
        t = inits[node.input[0]]
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if len(t.dims) == 2 and t.dims[0] >= EMBEDDING_MIN_ROWS and axis == 0 and t.data_type == TensorProto.FLOAT:
            sites.append(EmbeddingSite(layer_name(t.name), node.name, t.name, node.input[1], node.output[0]))
    return sites


@dataclass
class LayerQuant:
    """What ``quantize_graph`` needs for one Linear layer.

    ``codes`` (out, in) int8 symmetric per output channel, ``scale`` (out,) float32; for static
    mode also the calibrated uint8 activation ``input_scale`` / ``input_zero_point``.
    """

    mode: str
    codes: np.ndarray | None = None
    scale: np.ndarray | None = None
    input_scale: float | None = None
    input_zero_point: int | None = None


def _weight_codes(codes: np.ndarray, encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """int8 (out, in) codes → ((in, out) codes for MatMulInteger's B, their zero point)."""
    b = np.ascontiguousarray(codes.T)  # (in, out)
    if encoding == "u8":
        return (b.astype(np.int16) + 128).astype(np.uint8), np.array(128, dtype=np.uint8)
    if encoding == "s8":
        return b.astype(np.int8), np.array(0, dtype=np.int8)
    raise ValueError(f"weight_encoding must be 'u8' or 's8', got {encoding!r}")


def quantize_graph(
    model: onnx.ModelProto,
    layers: dict[str, LayerQuant],
    embeddings: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    weight_encoding: str = "u8",
) -> onnx.ModelProto:
    """A new model with the listed Linear layers (and embedding tables) quantized.

    ``layers`` maps layer name → ``LayerQuant``; layers not listed or in mode ``fp32`` stay as
    they are. ``embeddings`` maps embedding layer name → (int8 codes (V, D), row scales (V,)).
    Activation quantizers are shared between layers reading the same tensor (q, k and v).
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())  # never mutate the caller's
    embeddings = embeddings or {}
    graph = model.graph
    by_node = {s.node: s for s in linear_sites(model) if layers.get(s.layer, LayerQuant("fp32")).mode != "fp32"}
    emb_by_node = {s.node: s for s in embedding_sites(model) if s.layer in embeddings}
    for name, lq in layers.items():
        if lq.mode not in MODES:
            raise ValueError(f"layer {name}: unknown mode {lq.mode!r}; expected one of {MODES}")
    new_inits: list[onnx.TensorProto] = []
    dropped: set[str] = set()
    shared: dict[tuple, tuple[str, str, str]] = {}  # (mode, x, scale, zp) → (xq, x_scale, x_zp)
    nodes: list[onnx.NodeProto] = []

    def const(name: str, arr: np.ndarray) -> str:
        new_inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    for node in graph.node:
        if node.name in emb_by_node:
            site = emb_by_node[node.name]
            codes, scale = embeddings[site.layer]
            q = const(f"{site.table}.int8", codes.astype(np.int8))
            s = const(f"{site.table}.row_scale", scale.astype(np.float32).reshape(-1, 1))  # (V, 1)
            p = site.node
            nodes += [
                helper.make_node("Gather", [q, site.indices], [f"{p}.codes"], name=f"{p}.gather_codes"),
                helper.make_node("Cast", [f"{p}.codes"], [f"{p}.codes_f"], name=f"{p}.cast", to=TensorProto.FLOAT),
                helper.make_node("Gather", [s, site.indices], [f"{p}.scales"], name=f"{p}.gather_scales"),
                helper.make_node("Mul", [f"{p}.codes_f", f"{p}.scales"], [site.output], name=f"{p}.dequant"),
            ]
            dropped.add(site.table)
            continue
        if node.name not in by_node:
            nodes.append(node)
            continue
        site = by_node[node.name]
        lq = layers[site.layer]
        if lq.codes is None or lq.scale is None:
            raise ValueError(f"layer {site.layer}: mode {lq.mode} needs weight codes and scales")
        p = site.layer
        wq, wzp = _weight_codes(lq.codes, weight_encoding)
        wq_name = const(f"{p}.weight_q", wq)
        wzp_name = const(f"{p}.weight_zero_point", wzp)
        w_scale = lq.scale.astype(np.float32)  # (out,)
        if lq.mode == "static":
            if lq.input_scale is None or lq.input_zero_point is None:
                raise ValueError(f"layer {p}: static mode needs a calibrated input_scale and input_zero_point")
            key = ("static", site.activation, float(lq.input_scale), int(lq.input_zero_point))
            if key not in shared:
                tag = f"{site.activation}.q{len(shared)}"
                xs = const(f"{tag}.scale", np.array(lq.input_scale, dtype=np.float32))
                xzp = const(f"{tag}.zero_point", np.array(lq.input_zero_point, dtype=np.uint8))
                nodes.append(helper.make_node("QuantizeLinear", [site.activation, xs, xzp], [f"{tag}.codes"], name=f"{tag}.quantize"))
                shared[key] = (f"{tag}.codes", xs, xzp)
            xq, _, xzp = shared[key]
            rescale = const(f"{p}.rescale", (np.float32(lq.input_scale) * w_scale).astype(np.float32))
        else:
            key = ("dynamic", site.activation)
            if key not in shared:
                tag = f"{site.activation}.dq{len(shared)}"
                outs = [f"{tag}.codes", f"{tag}.scale", f"{tag}.zero_point"]
                nodes.append(helper.make_node("DynamicQuantizeLinear", [site.activation], outs, name=f"{tag}.quantize"))
                shared[key] = tuple(outs)
            xq, xs, xzp = shared[key]
            ws = const(f"{p}.weight_scale", w_scale)
            nodes.append(helper.make_node("Mul", [xs, ws], [f"{p}.rescale"], name=f"{p}.rescale"))
            rescale = f"{p}.rescale"
        nodes += [
            helper.make_node("MatMulInteger", [xq, wq_name, xzp, wzp_name], [f"{p}.acc"], name=f"{p}.matmul_integer"),
            helper.make_node("Cast", [f"{p}.acc"], [f"{p}.acc_f"], name=f"{p}.cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{p}.acc_f", rescale], [site.output], name=f"{p}.dequant"),
        ]
        dropped.add(site.weight)

    still_used = {i for n in nodes for i in n.input}
    keep = [t for t in graph.initializer if t.name not in dropped or t.name in still_used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(keep + new_inits)
    return model
