"""Quantized models on disk (safetensors, never pickle) and applying them to the engine graph.

``model.int8.safetensors`` holds every parameter of the *fused* engine graph, named by graph
node (``layer.0.attention.qkv``, ``layer.0.ffn.down``, …), so the file alone describes the
model:

- ``<layer>.weight.int8`` int8 (out, in) + ``<layer>.weight.scale`` float32 (out,) for each
  quantized Linear; ``<layer>.input_scale`` float32 (1,) + ``<layer>.input_zero_point`` uint8
  (1,) when its activations are static; ``<layer>.smooth`` float32 (in,) when the plan uses
  SmoothQuant factors for it (the codes then quantize ``W·diag(s)``); ``<layer>.weight.fp16`` float16 (out, in) for layers
  the plan keeps in floating point (they *compute* in fp32; storing them as fp16 halves their
  bytes for an output error of ~1e-7 in cosine, far below the plan's int8 errors);
  ``<layer>.bias`` always;
- ``embeddings.word.int8`` + ``embeddings.word.scale`` (per row), the other embedding tables
  and every LayerNorm's ``<node>.gamma`` / ``<node>.beta`` in float32;
- metadata (str → str): ``format`` = ``openhood-int8``, ``plan`` (JSON: per layer mode, reason,
  sensitivities, calibrated range and qparams), ``quantization`` (JSON: method, samples,
  target, source model, length distributions).

Loading (``apply_int8``) swaps the graph's Linears for ``Int8Linear`` objects built from the
file; the graph itself still comes from the model folder (config and fp32 structure), and a
mismatch between file and graph (another model, other shapes) is refused by name and shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from openhood.engine.graph.graph import Graph
from openhood.engine.quant.linear import Fp16Linear
from openhood.engine.quant.plan import EMBEDDING_NODE, Codes, EmbeddingCodes, LayerPlan, apply_plan

if TYPE_CHECKING:
    from openhood.engine.quant.quantizer import QuantResult

INT8_FORMAT = "openhood-int8"
FP16_FORMAT = "openhood-fp16"
INT8_FILE = "model.int8.safetensors"
FP16_FILE = "model.fp16.safetensors"


def _non_linear_params(graph: Graph, dtype: type[np.floating[Any]] = np.float32) -> dict[str, np.ndarray]:
    out = {}
    for node in graph.nodes:
        for k, v in node.params.items():
            if node.name == EMBEDDING_NODE and k == "word":
                continue
            out[f"{node.name}.{k}"] = np.ascontiguousarray(v, dtype=dtype)
    return out


def save_int8(path: str | Path, graph: Graph, result: QuantResult, info: dict[str, Any]) -> Path:
    """Write ``result`` (a ``QuantResult`` for the fused fp32 ``graph``) to ``path``."""
    tensors: dict[str, np.ndarray] = {}
    for d in result.decisions:
        lin = graph.node(d.layer).linear
        if d.mode == "fp32":
            tensors[f"{d.layer}.weight.fp16"] = np.ascontiguousarray(lin.weight.T, dtype=np.float16)  # (out, in)
        else:
            codes, scale = result.codes[d.layer]
            tensors[f"{d.layer}.weight.int8"] = np.ascontiguousarray(codes)
            tensors[f"{d.layer}.weight.scale"] = np.ascontiguousarray(scale)
            if d.smooth:
                tensors[f"{d.layer}.smooth"] = np.ascontiguousarray(result.smooth[d.layer], dtype=np.float32)
            if d.mode == "static":
                tensors[f"{d.layer}.input_scale"] = np.array([d.input_scale], dtype=np.float32)
                tensors[f"{d.layer}.input_zero_point"] = np.array([d.input_zero_point], dtype=np.uint8)
        if lin.bias is not None:
            tensors[f"{d.layer}.bias"] = lin.bias
    if result.embedding is not None:
        tensors[f"{EMBEDDING_NODE}.word.int8"], tensors[f"{EMBEDDING_NODE}.word.scale"] = result.embedding
    else:
        tensors[f"{EMBEDDING_NODE}.word"] = graph.node(EMBEDDING_NODE).params["word"]
    tensors.update(_non_linear_params(graph))
    meta = {"format": INT8_FORMAT, "plan": json.dumps(result.plan_json()), "quantization": json.dumps(info)}
    path = Path(path)
    save_file(tensors, str(path), metadata=meta)
    return path


def save_fp16(path: str | Path, graph: Graph) -> Path:
    """Every graph parameter as float16 (Linear weights (out, in)): the fp16 model's size on disk."""
    tensors = {
        f"{n}.weight": np.ascontiguousarray(lin.weight.T, dtype=np.float16) for n, lin in graph.linears().items()
    }
    tensors.update(
        {f"{n}.bias": lin.bias.astype(np.float16) for n, lin in graph.linears().items() if lin.bias is not None}
    )
    tensors[f"{EMBEDDING_NODE}.word"] = graph.node(EMBEDDING_NODE).params["word"].astype(np.float16)
    tensors.update(_non_linear_params(graph, np.float16))
    save_file(tensors, str(path), metadata={"format": FP16_FORMAT})
    return Path(path)


def read_int8(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    """(tensors, plan, quantization info) of an ``openhood-int8`` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata() or {})
        if meta.get("format") != INT8_FORMAT:
            raise ValueError(f"{path} is not an openhood int8 file (metadata format={meta.get('format')!r})")
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 -- safe_open is not iterable
    return tensors, json.loads(meta["plan"]), json.loads(meta.get("quantization", "{}"))


def load_plan(
    graph: Graph, path: str | Path
) -> tuple[list[LayerPlan], Codes, dict[str, np.ndarray], EmbeddingCodes | None, dict[str, Any]]:
    """(decisions, codes, smoothing factors, embedding, quantization info) of the plan at
    ``path``, checked against ``graph`` (the fused fp32 graph it must have been made for)."""
    tensors, plan, info = read_int8(path)
    linears = graph.linears()
    unknown = sorted(set(plan["layers"]) - set(linears))
    if unknown:
        raise ValueError(
            f"{path} was made for another graph: it quantizes layers {unknown[:3]} this model does not have"
        )
    decisions: list[LayerPlan] = []
    codes: Codes = {}
    smooth: dict[str, np.ndarray] = {}
    for name, d in plan["layers"].items():
        fields: dict[str, Any] = {k: (tuple(v) if k == "input_range" else v) for k, v in d.items()}
        decisions.append(LayerPlan(layer=name, **fields))
        if d["mode"] == "fp32":
            continue
        codes[name] = (tensors[f"{name}.weight.int8"], tensors[f"{name}.weight.scale"])
        if codes[name][0].shape != (linears[name].out_features, linears[name].in_features):
            raise ValueError(
                f"{path}: layer {name} is {codes[name][0].shape}, the model's is "
                f"{(linears[name].out_features, linears[name].in_features)}"
            )
        if d.get("smooth"):
            if f"{name}.smooth" not in tensors:
                raise ValueError(
                    f"{path}: layer {name} is planned with SmoothQuant factors but {name}.smooth is missing"
                )
            smooth[name] = tensors[f"{name}.smooth"]
    embedding = None
    if f"{EMBEDDING_NODE}.word.int8" in tensors:
        embedding = (tensors[f"{EMBEDDING_NODE}.word.int8"], tensors[f"{EMBEDDING_NODE}.word.scale"])
        if embedding[0].shape != graph.node(EMBEDDING_NODE).params["word"].shape:
            raise ValueError(
                f"{path}: embedding table {embedding[0].shape} does not match the model's "
                f"{graph.node(EMBEDDING_NODE).params['word'].shape}"
            )
    fp16 = {name: tensors[f"{name}.weight.fp16"] for name, d in plan["layers"].items() if d["mode"] == "fp32"}
    return decisions, codes, smooth, embedding, {**info, "fp16_weights": fp16}


def apply_int8(graph: Graph, path: str | Path, emulate: bool = False, weight_encoding: str = "auto") -> Graph:
    """A copy of the fused fp32 ``graph`` running the int8 plan stored at ``path``.

    NumPy execution is weight-only (dequantized int8 weights, fp32 activations) unless
    ``emulate``; exported to ONNX the layers become integer sub-graphs (``Int8Linear``). Layers
    the plan keeps in float run from their stored fp16 weights.
    """
    decisions, codes, smooth, embedding, info = load_plan(graph, path)
    g = apply_plan(graph, decisions, codes, embedding, emulate, weight_encoding, smooth)
    for name, w16 in info["fp16_weights"].items():
        g.replace_linear(name, Fp16Linear(w16.T, g.node(name).linear.bias))
    g.meta["precision"] = "int8"
    return g


def apply_fp16(graph: Graph) -> Graph:
    """A copy of ``graph`` with float16-stored Linear weights and embedding table."""
    g = graph.clone()
    for name, lin in g.linears().items():
        g.replace_linear(name, Fp16Linear(lin.weight.astype(np.float16), lin.bias))
    node = g.node(EMBEDDING_NODE)
    node.params = dict(node.params, word=node.params["word"].astype(np.float16).astype(np.float32))
    g.meta["precision"] = "fp16"
    return g
