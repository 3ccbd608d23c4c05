"""A tiny embedding model as an ONNX graph, for quantization tests that must run in seconds.

Same shape of computation as a BERT sentence encoder's quantizable parts: a vocabulary
``Gather``, Linear layers as ``MatMul`` + ``Add`` (with a GELU and a residual), mean pooling
over the mask and L2 normalization. Weights are random but scaled like a trained model's, and
the source checkpoint dict uses Hugging Face style (out, in) tensor names so the storage
mapping (graph layer → checkpoint tensor) is exercised, including a fused q|k|v-like layer.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, DIM, HIDDEN = 1000, 32, 64


def tiny_checkpoint(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    return {
        "embeddings.word_embeddings.weight": f(VOCAB, DIM),
        "proj.a.weight": f(DIM, DIM),  # fused with proj.b into one graph layer
        "proj.b.weight": f(DIM, DIM),
        "proj.bias": f(2 * DIM),
        "up.weight": f(HIDDEN, 2 * DIM),
        "up.bias": f(HIDDEN),
        "down.weight": f(DIM, HIDDEN),
        "down.bias": f(DIM),
    }


def tiny_onnx(ckpt: dict[str, np.ndarray]) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(ckpt["embeddings.word_embeddings.weight"], "embeddings.word.weight"),
        numpy_helper.from_array(np.concatenate([ckpt["proj.a.weight"], ckpt["proj.b.weight"]]).T.copy(), "layer.0.proj.weight"),
        numpy_helper.from_array(ckpt["proj.bias"], "layer.0.proj.bias"),
        numpy_helper.from_array(ckpt["up.weight"].T.copy(), "layer.0.up.weight"),
        numpy_helper.from_array(ckpt["up.bias"], "layer.0.up.bias"),
        numpy_helper.from_array(ckpt["down.weight"].T.copy(), "layer.0.down.weight"),
        numpy_helper.from_array(ckpt["down.bias"], "layer.0.down.bias"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["embeddings.word.weight", "input_ids"], ["emb"]),  # (B, T, D)
        n("MatMul", ["emb", "layer.0.proj.weight"], ["p0"]),
        n("Add", ["p0", "layer.0.proj.bias"], ["p"]),  # (B, T, 2D)
        n("MatMul", ["p", "layer.0.up.weight"], ["u0"]),
        n("Add", ["u0", "layer.0.up.bias"], ["u"]),
        n("Gelu", ["u"], ["g"]),  # (B, T, H)
        n("MatMul", ["g", "layer.0.down.weight"], ["d0"]),
        n("Add", ["d0", "layer.0.down.bias"], ["d"]),
        n("Add", ["d", "emb"], ["h"]),  # residual (B, T, D)
        n("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["mf", "axis2"], ["m3"]),  # (B, T, 1)
        n("Mul", ["h", "m3"], ["hm"]),
        n("ReduceSum", ["hm", "axis1"], ["s"], keepdims=0),  # (B, D)
        n("ReduceSum", ["m3", "axis1"], ["c"], keepdims=0),  # (B, 1)
        n("Div", ["s", "c"], ["pooled"]),
        n("LpNormalization", ["pooled"], ["embeddings"], axis=-1, p=2),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "T"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "T"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["B", DIM])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def token_batches(n_texts: int, seed: int = 1, batch: int = 16) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random "texts" of 3..24 tokens, padded per batch."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 25, n_texts)
    out = []
    for s in range(0, n_texts, batch):
        ls = lengths[s : s + batch]
        ids = np.zeros((len(ls), ls.max()), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, length in enumerate(ls):
            ids[r, :length] = rng.integers(1, VOCAB, length)
            mask[r, :length] = 1
        out.append((ids, mask))
    return out
