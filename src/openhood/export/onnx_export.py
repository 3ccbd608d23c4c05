"""Export openhood's op graph (``openhood.engine.graph.graph.Graph``) to ONNX with ``onnx.helper``.

The exporter walks OUR graph, fused or not, node by node, and emits the equivalent ONNX
operators: no tracing, no torch. Hidden states are (B, T, C) in ONNX (the engine's (N, C) rows
are an implementation detail), batch and sequence axes are symbolic. A Linear's product is
emitted by ``openhood.export.linear.emit_matmul`` for its kind (a quantized Linear becomes its
integer sub-graph; a float one ``MatMul(x, W)`` with W an (in, out) initializer named
``<node>.weight``), plus ``Add(<node>.bias)``.

CNN graphs (channels last in the engine) take ``pixel_values`` (B, H, W, 3) as the engine does and
transpose once to NCHW, ONNX's convolution layout; every conv is ``Conv`` with
``auto_pad=SAME_UPPER`` (TensorFlow's SAME: the odd padding pixel after), a depthwise conv is
``Conv`` with ``group = channels``, a fused epilogue becomes ``Add`` (residual) and ``Clip``
(ReLU6), which ONNX Runtime fuses back into its conv kernel.

GELU is the exact erf form (``x * 0.5 * (1 + Erf(x / sqrt 2))``, which ONNX Runtime fuses into
its Gelu kernel), LayerNorm is ``LayerNormalization`` (hence opset 17). The trade-off: one
mapping per op type, kept in this file; an op the exporter does not know is an error, never a
silent fallback.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openhood.engine.graph.graph import Graph, Node
from openhood.engine.kernels.ops import MASK_NEG
from openhood.export.linear import emit_matmul
from openhood.export.qdq import emit_int8_gather

OPSET = 17
EXPORTER_VERSION = "1"
INT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxGraphBuilder:
    """Collects nodes and initializers; hands out unique tensor names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._counter = 0

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}/{self._counter}"  # the counter makes it unique

    def initializer(self, name: str, array: np.ndarray) -> str:
        if name in self._names:
            raise ValueError(f"duplicate ONNX tensor name {name!r}")
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value, hint: str = "const", dtype=np.float32) -> str:
        return self.initializer(self.fresh(hint), np.asarray(value, dtype=dtype))

    def node(self, op: str, inputs: list[str], name: str | None = None, output: str | None = None, **attrs) -> str:
        out = output or self.fresh(name or op)
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh((name or op) + ".node"), **attrs))
        return out


def _linear(b: OnnxGraphBuilder, node: Node, x: str) -> str:
    lin = node.linear
    y = emit_matmul(b, lin, x, node.name)
    if lin.bias is not None:
        y = b.node("Add", [y, b.initializer(f"{node.name}.bias", lin.bias)], name=f"{node.name}.bias_add")
    return y


def _activation(b: OnnxGraphBuilder, kind: str, x: str, name: str, output: str | None) -> str:
    if kind == "gelu":
        h = b.node("Div", [x, b.const(math.sqrt(2.0))], name=f"{name}.gelu_div")
        h = b.node("Erf", [h], name=f"{name}.gelu_erf")
        h = b.node("Add", [h, b.const(1.0)], name=f"{name}.gelu_add")
        h = b.node("Mul", [x, h], name=f"{name}.gelu_mul")
        return b.node("Mul", [h, b.const(0.5)], name=f"{name}.gelu_half", output=output)
    if kind == "relu":
        return b.node("Relu", [x], name=name, output=output)
    if kind == "softmax":
        return b.node("Softmax", [x], name=name, output=output, axis=-1)
    raise ValueError(f"unknown activation {kind!r}")


def _attention(b: OnnxGraphBuilder, node: Node, args: list[str], output: str) -> str:
    heads = node.attrs["heads"]
    name = node.name
    if len(args) == 2:  # packed (B, T, 3C)
        packed, bias = args
        q, k, v = (b.fresh(f"{name}.{s}") for s in "qkv")
        # opset 17 Split without sizes: three equal parts of the last axis
        b.nodes.append(helper.make_node("Split", [packed], [q, k, v], name=b.fresh(f"{name}.split"), axis=-1))
    else:
        q, k, v, bias = args
    split_shape = b.const([0, 0, heads, -1], f"{name}.heads_shape", np.int64)  # (B, T, H, dh)

    def heads_of(x: str, perm: list[int], tag: str) -> str:
        r = b.node("Reshape", [x, split_shape], name=f"{name}.{tag}_reshape")
        return b.node("Transpose", [r], name=f"{name}.{tag}_transpose", perm=perm)

    qh = heads_of(q, [0, 2, 1, 3], "q")  # (B, H, T, dh)
    kt = heads_of(k, [0, 2, 3, 1], "k")  # (B, H, dh, T)
    vh = heads_of(v, [0, 2, 1, 3], "v")
    s = b.node("MatMul", [qh, kt], name=f"{name}.scores")  # (B, H, T, T)
    if node.attrs["scale"] != 1.0:
        s = b.node("Mul", [s, b.const(node.attrs["scale"])], name=f"{name}.scale")
    s = b.node("Add", [s, bias], name=f"{name}.mask")
    p = b.node("Softmax", [s], name=f"{name}.softmax", axis=-1)
    ctx = b.node("MatMul", [p, vh], name=f"{name}.context")  # (B, H, T, dh)
    ctx = b.node("Transpose", [ctx], name=f"{name}.merge_transpose", perm=[0, 2, 1, 3])
    return b.node(
        "Reshape", [ctx, b.const([0, 0, -1], f"{name}.merge_shape", np.int64)], name=f"{name}.merge", output=output
    )


def _conv_epilogue(b: OnnxGraphBuilder, node: Node, y: str, args: list[str], out: str) -> None:
    if len(args) == 2:  # residual fused into the conv
        y = b.node("Add", [y, args[1]], name=f"{node.name}.residual")
    act = node.attrs.get("activation")
    if act == "relu6":
        b.node("Clip", [y, b.const(0.0), b.const(6.0)], name=f"{node.name}.relu6", output=out)
    elif act == "relu":
        b.node("Relu", [y], name=f"{node.name}.relu", output=out)
    else:
        b.node("Identity", [y], name=f"{node.name}.out", output=out)


def _conv(b: OnnxGraphBuilder, node: Node, args: list[str], out: str) -> None:
    name, k, stride = node.name, node.attrs.get("kernel"), node.attrs["stride"]
    if node.op == "Conv":
        lin = node.linear
        if not isinstance(getattr(lin, "weight", None), np.ndarray) or lin.weight.dtype != np.float32:
            raise NotImplementedError(f"conv {name!r} holds a {type(lin).__name__}: only float convs export")
        cout = lin.out_features
        w = lin.weight.reshape(k, k, -1, cout).transpose(3, 2, 0, 1)  # (KH*KW*Cin, Cout) → (Cout, Cin, KH, KW)
        bias, group = lin.bias, 1
    else:
        dw = node.params["weight"]  # (KH, KW, C) → (C, 1, KH, KW)
        k, w, bias, group = dw.shape[0], dw.transpose(2, 0, 1)[:, None], node.params.get("bias"), dw.shape[2]
    inputs = [args[0], b.initializer(f"{name}.weight", np.ascontiguousarray(w, dtype=np.float32))]
    if bias is not None:
        inputs.append(b.initializer(f"{name}.bias", bias))
    y = b.node(
        "Conv", inputs, name=name, auto_pad="SAME_UPPER", strides=[stride, stride], kernel_shape=[k, k], group=group
    )
    _conv_epilogue(b, node, y, args, out)


def _emit(b: OnnxGraphBuilder, node: Node, args: list[str]) -> None:
    out = node.outputs[0]
    op, p, name = node.op, node.params, node.name
    if op == "Embeddings":
        (ids,) = args
        if "word_int8" in p:  # an int8 model: the table stays int8 in the ONNX file too
            word = emit_int8_gather(b, f"{name}.word", p["word_int8"], p["word_scale"], ids)  # (B, T, C)
        else:
            word = b.node(
                "Gather", [b.initializer(f"{name}.word", p["word"]), ids], name=f"{name}.word_gather"
            )  # (B, T, C)
        seq = b.node("Shape", [ids], name=f"{name}.seq_len", start=1, end=2)  # [T]
        pos = b.node(
            "Slice",
            [
                b.initializer(f"{name}.position", p["position"]),
                b.const([0], "zero", np.int64),
                seq,
                b.const([0], "axis0", np.int64),
            ],
            name=f"{name}.positions",
        )  # (T, C)
        pos = b.node("Add", [pos, b.initializer(f"{name}.token_type0", p["token_type"][0])], name=f"{name}.pos_type")
        b.node("Add", [word, pos], name=name, output=out)
    elif op == "LayerNorm":
        b.node(
            "LayerNormalization",
            [args[0], b.initializer(f"{name}.gamma", p["gamma"]), b.initializer(f"{name}.beta", p["beta"])],
            name=name,
            output=out,
            axis=-1,
            epsilon=float(node.attrs["eps"]),
        )
    elif op == "AttentionMask":
        m = b.node("Cast", [args[0]], name=f"{name}.cast", to=TensorProto.FLOAT)
        m = b.node("Sub", [b.const(1.0), m], name=f"{name}.invert")
        m = b.node("Mul", [m, b.const(float(MASK_NEG))], name=f"{name}.bias")  # (B, T): 0 or -1e9
        b.node("Unsqueeze", [m, b.const([1, 2], "axes12", np.int64)], name=name, output=out)  # (B, 1, 1, T)
    elif op == "Linear":
        y = _linear(b, node, args[0])
        act = node.attrs.get("activation")
        if act:
            _activation(b, act, y, name, out)
        else:
            b.node("Identity", [y], name=f"{name}.out", output=out)
    elif op == "LinearAddLayerNorm":
        y = _linear(b, node, args[0])
        y = b.node("Add", [y, args[1]], name=f"{name}.residual")
        b.node(
            "LayerNormalization",
            [y, b.initializer(f"{name}.gamma", p["gamma"]), b.initializer(f"{name}.beta", p["beta"])],
            name=f"{name}.norm",
            output=out,
            axis=-1,
            epsilon=float(node.attrs["eps"]),
        )
    elif op == "Add":
        b.node("Add", args, name=name, output=out)
    elif op in ("Gelu", "Relu", "Softmax"):
        _activation(b, op.lower(), args[0], name, out)
    elif op == "Attention":
        _attention(b, node, args, out)
    elif op == "MeanPool":
        h, mask = args
        m = b.node("Cast", [mask], name=f"{name}.cast", to=TensorProto.FLOAT)
        m = b.node("Unsqueeze", [m, b.const([2], "axes2", np.int64)], name=f"{name}.unsqueeze")  # (B, T, 1)
        axis1 = b.const([1], "axes1", np.int64)
        summed = b.node(
            "ReduceSum", [b.node("Mul", [h, m], name=f"{name}.masked"), axis1], name=f"{name}.sum", keepdims=0
        )
        count = b.node("ReduceSum", [m, axis1], name=f"{name}.count", keepdims=0)  # (B, 1)
        count = b.node("Max", [count, b.const(1e-9)], name=f"{name}.clamp")
        b.node("Div", [summed, count], name=name, output=out)
    elif op in ("Conv", "DepthwiseConv"):
        _conv(b, node, args, out)
    elif op == "MBConv":  # the fused block's convs, one after the other (ORT fuses on its own)
        *first, project = node.attrs["parts"]
        x = args[0]
        for part in first:
            y = b.fresh(part.name)
            _conv(b, part, [x], y)
            x = y
        _conv(b, project, [x, *args[1:]], out)
    elif op == "BatchNorm":
        b.node(
            "BatchNormalization",
            [args[0]] + [b.initializer(f"{name}.{k}", p[k]) for k in ("gamma", "beta", "mean", "var")],
            name=name,
            output=out,
            epsilon=float(node.attrs["eps"]),
        )
    elif op == "Relu6":
        b.node("Clip", [args[0], b.const(0.0), b.const(6.0)], name=name, output=out)
    elif op == "GlobalAvgPool":
        pooled = b.node("GlobalAveragePool", [args[0]], name=name)  # (B, C, 1, 1)
        b.node("Flatten", [pooled], name=f"{name}.flatten", output=out, axis=1)
    elif op == "L2Normalize":
        norm = b.node("ReduceL2", [args[0]], name=f"{name}.norm", axes=[-1], keepdims=1)
        norm = b.node("Max", [norm, b.const(1e-12)], name=f"{name}.clamp")
        b.node("Div", [args[0], norm], name=name, output=out)
    else:
        raise NotImplementedError(f"the ONNX exporter has no mapping for op {op!r} (node {name!r})")


def graph_to_onnx(graph: Graph, producer: str = "openhood") -> onnx.ModelProto:
    """Our op graph → a checked ONNX model (opset 17, symbolic batch/sequence axes)."""
    b = OnnxGraphBuilder()
    rename: dict[str, str] = {}
    images = len(graph.meta.get("input_layout", ())) == 4  # channels-last image input
    if images:  # (B, H, W, 3) → (B, 3, H, W) once; the graph's convs all run NCHW in ONNX
        rename[graph.inputs[0]] = b.node("Transpose", [graph.inputs[0]], name="to_nchw", perm=[0, 3, 1, 2])
    for node in graph.nodes:
        _emit(b, node, [rename.get(v, v) for v in node.inputs])
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        if n in INT_INPUTS
        else helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "height", "width", 3])
        if images
        else helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "features"])
        for n in graph.inputs
    ]
    # A pooled graph, an image classifier or a feature-vector model (an MLP) returns (batch, dim);
    # an encoder-only one its token states (batch, sequence, dim).
    rows_in = not any(n in INT_INPUTS for n in graph.inputs)
    pooled = images or rows_in or graph.nodes[-1].op in ("MeanPool", "L2Normalize")
    dims = ["batch", "dim"] if pooled else ["batch", "sequence", "dim"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in graph.outputs]
    g = helper.make_graph(b.nodes, "openhood", inputs, outputs, b.initializers)
    model = helper.make_model(
        g, producer_name=producer, producer_version=EXPORTER_VERSION, opset_imports=[helper.make_opsetid("", OPSET)]
    )
    model.ir_version = min(model.ir_version, 9)  # readable by older ONNX Runtime releases too
    onnx.checker.check_model(model)
    return model


def export_onnx(graph: Graph, path: str | Path) -> Path:
    """Write the graph as an .onnx file (atomically: a partial file never has the final name)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = graph_to_onnx(graph)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(model.SerializeToString())
    tmp.replace(path)
    return path
