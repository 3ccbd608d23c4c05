"""A tiny random BERT built with the engine's own structures, for end-to-end quantization tests.

Hugging Face tensor names and layout, 2 layers of hidden 32, a 1000-token vocabulary (tall
enough to count as a vocabulary table for the ONNX int8 rewrite), loaded through
``openhood.engine.models.bert.build_graph`` and fused like the real model, so the quantizer sees the
same node names (``layer.0.attention.qkv``, ``layer.0.ffn.down``, …) as for all-MiniLM-L6-v2.
Weights are scaled like a trained model's; one feed-forward unit is given an outlier-sized
weight so the activations have the heavy tail that makes static ranges lossy.
"""

from __future__ import annotations

import numpy as np

from openhood.engine.graph.fusion import fuse
from openhood.engine.models.bert import BertConfig, build_graph

VOCAB, HIDDEN, LAYERS, FFN = 1000, 32, 2, 64
CONFIG = BertConfig(
    hidden=HIDDEN,
    heads=4,
    layers=LAYERS,
    intermediate=FFN,
    eps=1e-12,
    max_positions=64,
    max_length=64,
    normalize=True,
    pooling="mean",
)


def tiny_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape, std=0.08):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": w(VOCAB, HIDDEN, std=0.5),
        "embeddings.position_embeddings.weight": w(64, HIDDEN, std=0.1),
        "embeddings.token_type_embeddings.weight": w(2, HIDDEN, std=0.1),
        "embeddings.LayerNorm.weight": np.ones(HIDDEN, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(HIDDEN, np.float32),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        for name, (o, n) in {
            "attention.self.query": (HIDDEN, HIDDEN),
            "attention.self.key": (HIDDEN, HIDDEN),
            "attention.self.value": (HIDDEN, HIDDEN),
            "attention.output.dense": (HIDDEN, HIDDEN),
            "intermediate.dense": (FFN, HIDDEN),
            "output.dense": (HIDDEN, FFN),
        }.items():
            t[f"{p}.{name}.weight"] = w(o, n, std=0.3)
            t[f"{p}.{name}.bias"] = w(o, std=0.02)
        t[f"{p}.intermediate.dense.weight"][3] *= 12.0  # one outlier unit feeding ffn.down
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[f"{p}.{ln}.weight"] = np.ones(HIDDEN, np.float32)
            t[f"{p}.{ln}.bias"] = np.zeros(HIDDEN, np.float32)
    return t


def tiny_graph(seed: int = 0):
    """The fused fp32 graph the backends would run."""
    return fuse(build_graph(CONFIG, tiny_weights(seed)))


def token_seqs(n: int, seed: int = 1, lo: int = 4, hi: int = 30) -> list[np.ndarray]:
    """Random "texts": [CLS]=1 … [SEP]=2 around ids in 5..VOCAB-1, lengths lo..hi-1."""
    rng = np.random.default_rng(seed)
    return [np.concatenate([[1], rng.integers(5, VOCAB, k - 2), [2]]).astype(np.int64) for k in rng.integers(lo, hi, n)]
