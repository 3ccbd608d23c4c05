"""Fusion passes: rewrite an op graph into fewer, fatter nodes with identical output.

Each pass takes a graph and returns a new one (the input is left untouched), so fused and
unfused graphs can run side by side in tests and benchmarks:

- ``merge_qkv``: three Linear projections of one input feeding an Attention become one
  (C, 3C) Linear, one GEMM with a 3x wider N instead of three; the 1/sqrt(d) score scale is
  folded into the query columns so attention skips a pass over its (B, H, T, T) scores.
- ``fuse_linear_activation``: Linear → Gelu | Relu | Softmax becomes one node whose bias and
  activation run in the matmul's output buffer, chunk by chunk while it is in cache.
- ``fuse_linear_add_layernorm``: Linear → Add(residual) → LayerNorm becomes one node: bias,
  residual and normalization in one cache-resident epilogue, no (N, C) temporaries.
- ``fold_batchnorm``: Conv | DepthwiseConv → BatchNorm becomes the conv alone, with weights
  W·γ/√(σ²+ε) and bias (b − μ)·γ/√(σ²+ε) + β (computed in float64 at load, once).
- ``fuse_conv_add``: Conv → Add(residual) becomes one conv that adds the residual in its
  epilogue (EfficientNet's project conv + skip connection).
- ``fuse_conv_activation``: Conv | DepthwiseConv → Relu | Relu6 becomes the conv with the
  clip in its epilogue.
- ``fuse_mbconv``: the fused expand 1×1 → depthwise → project 1×1 (+ residual) of an
  inverted-residual block becomes one ``MBConv`` node that runs the three tile by tile, so
  the 6x-wide hidden activations stay in L2 instead of going to memory and back twice.

A pattern is only rewritten when the intermediate values have no other reader. Fused nodes
keep the name of their Linear (``layer.0.ffn.up``), so ``Graph.replace_linear`` still finds it.
The trade-off: patterns are matched structurally on op names, not via a general rewriter.
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np

from openhood.engine.graph.graph import Graph, Node
from openhood.engine.kernels.linear import Linear

ACTIVATIONS = {"Gelu": "gelu", "Relu": "relu", "Softmax": "softmax"}


def _single_reader(graph: Graph, value: str) -> Node | None:
    readers = graph.consumers().get(value, [])
    if len(readers) != 1 or value in graph.outputs:
        return None
    return readers[0]


def merge_qkv(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    drop: set[str] = set()
    replace: dict[str, Node] = {}
    for att in g.nodes:
        if att.op != "Attention" or len(att.inputs) != 4:
            continue
        found = [producer.get(v) for v in att.inputs[:3]]
        lins = [n for n in found if n is not None and n.op == "Linear" and not n.attrs.get("activation")]
        if len(lins) != 3:
            continue
        if len({n.inputs[0] for n in lins}) != 1 or any(_single_reader(g, n.outputs[0]) is not att for n in lins):
            continue
        if any(type(n.linear) is not Linear for n in lins):
            continue  # merging needs the float weights; replaced (e.g. quantized) layers are kept as is
        q, k, v = (n.linear for n in lins)
        scale = np.float32(att.attrs["scale"])
        weight = np.concatenate([q.weight * scale, k.weight, v.weight], axis=1)  # (C, 3C)
        bias = np.concatenate([q.bias * scale, k.bias, v.bias])
        base = lins[0].name.rsplit(".", 1)[0]  # "layer.0.attention"
        packed = f"{base}.qkv_packed"
        replace[lins[0].name] = Node(f"{base}.qkv", "Linear", lins[0].inputs, (packed,), linear=Linear(weight, bias))
        drop.update(n.name for n in lins[1:])
        att.inputs = (packed, att.inputs[3])
        att.attrs["scale"] = 1.0
    g.nodes = [replace.get(n.name, n) for n in g.nodes if n.name not in drop]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "merge_qkv"]
    return g


def fuse_linear_activation(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    drop: set[str] = set()
    for act in g.nodes:
        if act.op not in ACTIVATIONS:
            continue
        lin = producer.get(act.inputs[0])
        if (
            lin is None
            or lin.op != "Linear"
            or lin.attrs.get("activation")
            or _single_reader(g, lin.outputs[0]) is not act
        ):
            continue
        lin.attrs["activation"] = ACTIVATIONS[act.op]
        lin.outputs = act.outputs
        drop.add(act.name)
    g.nodes = [n for n in g.nodes if n.name not in drop]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "linear_activation"]
    return g


def fuse_linear_add_layernorm(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    drop: set[str] = set()
    replace: dict[str, Node] = {}
    for ln in g.nodes:
        if ln.op != "LayerNorm":
            continue
        add = producer.get(ln.inputs[0])
        if add is None or add.op != "Add" or _single_reader(g, add.outputs[0]) is not ln:
            continue
        lin, residual = None, ""
        for i, v in enumerate(add.inputs):
            cand = producer.get(v)
            if (
                cand is not None
                and cand.op == "Linear"
                and not cand.attrs.get("activation")
                and _single_reader(g, v) is add
            ):
                lin, residual = cand, add.inputs[1 - i]
                break
        if lin is None:
            continue
        replace[lin.name] = Node(
            lin.name,
            "LinearAddLayerNorm",
            (lin.inputs[0], residual),
            ln.outputs,
            {"eps": ln.attrs["eps"]},
            dict(ln.params),
            linear=lin.linear,
        )
        drop.update((add.name, ln.name))
    # The fused node runs where the LayerNorm ran: its residual input is ready by then.
    by_output = {f.outputs[0]: f for f in replace.values()}
    out: list[Node] = []
    for n in g.nodes:
        if n.name in replace:
            continue
        if n.name in drop:
            if n.op == "LayerNorm":
                out.append(by_output[n.outputs[0]])
            continue
        out.append(n)
    g.nodes = out
    g.meta["fusions"] = [*g.meta.get("fusions", []), "linear_add_layernorm"]
    return g


CONV_OPS = ("Conv", "DepthwiseConv")
CONV_ACTIVATIONS = {"Relu": "relu", "Relu6": "relu6"}


def _plain_conv(node: Node | None) -> TypeGuard[Node]:
    """A conv whose output is still its raw sum: no activation and no residual fused yet."""
    return node is not None and node.op in CONV_OPS and not node.attrs.get("activation") and len(node.inputs) == 1


def fold_batchnorm(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    drop: set[str] = set()
    for bn in g.nodes:
        if bn.op != "BatchNorm":
            continue
        conv = producer.get(bn.inputs[0])
        if not _plain_conv(conv) or _single_reader(g, conv.outputs[0]) is not bn:
            continue
        if conv.op == "Conv" and type(conv.linear) is not Linear:
            continue  # folding needs the float weights
        p = bn.params
        scale = p["gamma"].astype(np.float64) / np.sqrt(p["var"].astype(np.float64) + bn.attrs["eps"])  # (Cout,)
        if conv.op == "Conv":
            w, b = conv.linear.weight, conv.linear.bias  # (K, Cout)
        else:
            w, b = conv.params["weight"], conv.params.get("bias")  # (KH, KW, C)
        bias = (np.zeros_like(scale) if b is None else b.astype(np.float64)) - p["mean"]
        weight = (w.astype(np.float64) * scale).astype(np.float32)
        bias = (bias * scale + p["beta"]).astype(np.float32)
        if conv.op == "Conv":
            conv.linear = Linear(weight, bias)
        else:
            conv.params = {"weight": weight, "bias": bias}
        conv.outputs = bn.outputs
        drop.add(bn.name)
    g.nodes = [n for n in g.nodes if n.name not in drop]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "batchnorm_fold"]
    return g


def fuse_conv_add(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    fused: dict[str, Node] = {}  # Add name → the conv that replaces it
    for add in g.nodes:
        if add.op != "Add":
            continue
        for i, v in enumerate(add.inputs):
            conv = producer.get(v)
            if conv is not None and conv.op == "Conv" and _plain_conv(conv) and _single_reader(g, v) is add:
                conv.inputs = (conv.inputs[0], add.inputs[1 - i])
                conv.outputs = add.outputs
                fused[add.name] = conv
                break
    moved = {c.name for c in fused.values()}
    # The conv now reads the residual too: it runs where the Add ran, when both are ready.
    g.nodes = [fused.get(n.name, n) for n in g.nodes if n.name not in moved]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "conv_add"]
    return g


def fuse_conv_activation(graph: Graph) -> Graph:
    g = graph.clone()
    producer = g.producer()
    drop: set[str] = set()
    for act in g.nodes:
        if act.op not in CONV_ACTIVATIONS:
            continue
        conv = producer.get(act.inputs[0])
        if (
            conv is None
            or conv.op not in CONV_OPS
            or conv.attrs.get("activation")
            or _single_reader(g, conv.outputs[0]) is not act
        ):
            continue
        conv.attrs["activation"] = CONV_ACTIVATIONS[act.op]
        conv.outputs = act.outputs
        drop.add(act.name)
    g.nodes = [n for n in g.nodes if n.name not in drop]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "conv_activation"]
    return g


def _pointwise(node: Node | None) -> TypeGuard[Node]:
    return (
        node is not None
        and node.op == "Conv"
        and node.attrs["kernel"] == 1
        and node.attrs["stride"] == 1
        and type(node.linear) is Linear
    )


def fuse_mbconv(graph: Graph) -> Graph:
    """[Conv 1×1 + ReLU6 →] DepthwiseConv + ReLU6 → Conv 1×1 (+ residual) → one ``MBConv`` node
    (``conv.mbconv``), run tile by tile in L2. Runs after the other CNN passes (it matches their
    fused convs); the three convs are kept whole in ``attrs["parts"]`` for export and profiling."""
    g = graph.clone()
    producer = g.producer()
    replace: dict[str, Node] = {}  # project conv name → the block
    drop: set[str] = set()
    for dw in g.nodes:
        if dw.op != "DepthwiseConv" or dw.attrs.get("activation") != "relu6" or "bias" not in dw.params:
            continue
        project = _single_reader(g, dw.outputs[0])
        if not _pointwise(project) or project.attrs.get("activation") or project.inputs[0] != dw.outputs[0]:
            continue
        expand = producer.get(dw.inputs[0])
        if not (
            _pointwise(expand)
            and expand.attrs.get("activation") == "relu6"
            and len(expand.inputs) == 1
            and _single_reader(g, expand.outputs[0]) is dw
        ):
            expand = None  # no expansion conv (Lite0's first block): the depthwise reads the input
        first = expand if expand is not None else dw
        block = dw.attrs.get("block", dw.name)
        parts = tuple(p for p in (expand, dw, project) if p is not None)
        replace[project.name] = Node(
            f"{block}.mbconv",
            "MBConv",
            (first.inputs[0], *project.inputs[1:]),
            project.outputs,
            {"kernel": dw.params["weight"].shape[0], "stride": dw.attrs["stride"], "block": block, "parts": parts},
        )
        drop.update(p.name for p in parts[:-1])
    g.nodes = [replace.get(n.name, n) for n in g.nodes if n.name not in drop]
    g.meta["fusions"] = [*g.meta.get("fusions", []), "mbconv"]
    return g


# Passes that only find convolution patterns (a transformer graph comes out unchanged).
CNN_PASSES = {
    "batchnorm_fold": fold_batchnorm,
    "conv_add": fuse_conv_add,
    "conv_activation": fuse_conv_activation,
    "mbconv": fuse_mbconv,
}
PASSES = {
    "merge_qkv": merge_qkv,
    "linear_activation": fuse_linear_activation,
    "linear_add_layernorm": fuse_linear_add_layernorm,
    **CNN_PASSES,
}


def fuse(graph: Graph, passes: list[str] | tuple[str, ...] | None = None) -> Graph:
    """Apply the named passes (all, in a fixed order, by default)."""
    names = list(PASSES) if passes is None else list(passes)
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise ValueError(f"unknown fusion passes {unknown}; known: {list(PASSES)}")
    for name in names:
        graph = PASSES[name](graph)
    return graph
