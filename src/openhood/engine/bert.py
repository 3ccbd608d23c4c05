"""Load a BERT-family sentence-embedding folder into an (unfused) op graph.

Reads ``config.json`` and ``model.safetensors`` with ``safetensors.numpy`` (never pickle: a
folder with only ``.bin``/``.pt`` weights is refused by ``openhood.models.weights_file``), plus
the sentence-transformers files: ``1_Pooling/config.json`` (only mean pooling is supported,
others are refused), ``modules.json`` (is there a ``Normalize`` module?) and
``sentence_bert_config.json`` (``max_seq_length``). The graph is built in its plain textbook
form, one node per operation; ``engine.fusion`` rewrites it for speed. The trade-off: weights
are copied once into (in, out) float32 layout (~90 MB for MiniLM) rather than memory-mapped,
because the transposed layout is what makes every matmul a plain GEMM.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openhood.engine.graph import Graph, Node
from openhood.engine.linear import Linear
from openhood.models import resolve_model_dir, weights_file


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int
    max_length: int  # sentence-transformers max_seq_length (<= max_positions)
    normalize: bool
    pooling: str  # "mean"
    model_name: str

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _read_json(path: Path) -> Any:  # parsed JSON, or None when the file is absent
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_config(folder: Path) -> BertConfig:
    cfg = _read_json(folder / "config.json")
    if cfg is None:
        raise FileNotFoundError(f"{folder} has no config.json")
    model_type = cfg.get("model_type", "bert")
    if model_type not in ("bert",):
        raise ValueError(f"model_type {model_type!r} is not supported: the NumPy engine implements BERT encoders")
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"hidden_act {act!r} is not supported (only exact-erf 'gelu')")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")

    pooling_cfg = _read_json(folder / "1_Pooling" / "config.json") or {"pooling_mode_mean_tokens": True}
    others = [k for k, v in pooling_cfg.items() if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"]
    if others or not pooling_cfg.get("pooling_mode_mean_tokens", False):
        raise ValueError(f"only mean pooling is supported; 1_Pooling/config.json asks for {others or 'no mean pooling'}")

    modules = _read_json(folder / "modules.json")
    # Without modules.json the folder is a bare HF encoder: we still L2-normalize (the engine
    # serves embeddings for cosine similarity); with it, Normalize must be listed.
    normalize = True if modules is None else any(m.get("type", "").endswith(".Normalize") for m in modules)

    max_positions = int(cfg.get("max_position_embeddings", 512))
    st_cfg = _read_json(folder / "sentence_bert_config.json") or {}
    max_length = min(int(st_cfg.get("max_seq_length", max_positions)), max_positions)

    return BertConfig(
        hidden=int(cfg["hidden_size"]),
        heads=int(cfg["num_attention_heads"]),
        layers=int(cfg["num_hidden_layers"]),
        intermediate=int(cfg["intermediate_size"]),
        eps=float(cfg.get("layer_norm_eps", 1e-12)),
        max_positions=max_positions,
        max_length=max_length,
        normalize=normalize,
        pooling="mean",
        model_name=_model_name(folder),
    )


def _model_name(folder: Path) -> str:
    from openhood.models import DEFAULT_MODEL_NAME, default_model_dir

    try:
        if folder.resolve() == default_model_dir().resolve():
            return DEFAULT_MODEL_NAME
    except FileNotFoundError:
        pass
    return folder.name if folder.name != "model" else folder.parent.name


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """All tensors of ``model.safetensors`` as NumPy arrays, prefix ``bert.`` stripped."""
    from safetensors import safe_open

    path = weights_file(folder)  # raises UnsafeModelFormatError for pickle-only folders
    tensors: dict[str, np.ndarray] = {}
    with safe_open(str(path), framework="np") as f:
        for key in f.keys():  # noqa: SIM118 -- safe_open has keys() but is not iterable
            name = key[len("bert.") :] if key.startswith("bert.") else key
            tensors[name] = f.get_tensor(key)
    return tensors


def build_graph(cfg: BertConfig, w: dict[str, np.ndarray]) -> Graph:
    """The textbook BERT encoder + mean pooling (+ L2 normalize) as an unfused op graph."""

    def t(name: str) -> np.ndarray:
        try:
            return np.ascontiguousarray(w[name], dtype=np.float32)
        except KeyError:
            raise KeyError(f"model.safetensors has no tensor {name!r}: not a BERT checkpoint?") from None

    def lin(prefix: str) -> Linear:
        return Linear.from_torch_layout(t(prefix + ".weight"), t(prefix + ".bias"))

    eps = cfg.eps
    nodes = [
        Node(
            "embeddings",
            "Embeddings",
            ("input_ids",),
            ("emb.sum",),
            params={
                "word": t("embeddings.word_embeddings.weight"),
                "position": t("embeddings.position_embeddings.weight"),
                "token_type": t("embeddings.token_type_embeddings.weight"),
            },
        ),
        Node("embeddings.norm", "LayerNorm", ("emb.sum",), ("h.0",), {"eps": eps},
             {"gamma": t("embeddings.LayerNorm.weight"), "beta": t("embeddings.LayerNorm.bias")}),
        Node("attention_mask", "AttentionMask", ("attention_mask",), ("mask.bias",)),
    ]
    scale = 1.0 / math.sqrt(cfg.head_dim)
    for i in range(cfg.layers):
        src = f"encoder.layer.{i}"
        p = f"layer.{i}"
        h = f"h.{i}"
        nodes += [
            Node(f"{p}.attention.query", "Linear", (h,), (f"{p}.q",), linear=lin(f"{src}.attention.self.query")),
            Node(f"{p}.attention.key", "Linear", (h,), (f"{p}.k",), linear=lin(f"{src}.attention.self.key")),
            Node(f"{p}.attention.value", "Linear", (h,), (f"{p}.v",), linear=lin(f"{src}.attention.self.value")),
            Node(f"{p}.attention.self", "Attention", (f"{p}.q", f"{p}.k", f"{p}.v", "mask.bias"), (f"{p}.ctx",),
                 {"heads": cfg.heads, "scale": scale}),
            Node(f"{p}.attention.out", "Linear", (f"{p}.ctx",), (f"{p}.attn_proj",), linear=lin(f"{src}.attention.output.dense")),
            Node(f"{p}.attention.residual", "Add", (f"{p}.attn_proj", h), (f"{p}.attn_sum",)),
            Node(f"{p}.attention.norm", "LayerNorm", (f"{p}.attn_sum",), (f"{p}.attn",), {"eps": eps},
                 {"gamma": t(f"{src}.attention.output.LayerNorm.weight"), "beta": t(f"{src}.attention.output.LayerNorm.bias")}),
            Node(f"{p}.ffn.up", "Linear", (f"{p}.attn",), (f"{p}.up",), linear=lin(f"{src}.intermediate.dense")),
            Node(f"{p}.ffn.act", "Gelu", (f"{p}.up",), (f"{p}.act",)),
            Node(f"{p}.ffn.down", "Linear", (f"{p}.act",), (f"{p}.down",), linear=lin(f"{src}.output.dense")),
            Node(f"{p}.ffn.residual", "Add", (f"{p}.down", f"{p}.attn"), (f"{p}.ffn_sum",)),
            Node(f"{p}.ffn.norm", "LayerNorm", (f"{p}.ffn_sum",), (f"h.{i + 1}",), {"eps": eps},
                 {"gamma": t(f"{src}.output.LayerNorm.weight"), "beta": t(f"{src}.output.LayerNorm.bias")}),
        ]
    last = f"h.{cfg.layers}"
    nodes.append(Node("pool", "MeanPool", (last, "attention_mask"), ("pooled" if cfg.normalize else "embedding",)))
    if cfg.normalize:
        nodes.append(Node("normalize", "L2Normalize", ("pooled",), ("embedding",)))
    meta = {"hidden": cfg.hidden, "heads": cfg.heads, "layers": cfg.layers, "eps": eps, "fusions": []}
    return Graph(nodes, ("input_ids", "attention_mask"), ("embedding",), meta)


@dataclass
class BertModel:
    config: BertConfig
    graph: Graph  # unfused
    folder: Path


def load_bert(path: str | Path | None = None) -> BertModel:
    """Folder (None = the bundled all-MiniLM-L6-v2) → config + unfused graph."""
    folder = resolve_model_dir(path)
    cfg = read_config(folder)
    weights = read_weights(folder)
    return BertModel(cfg, build_graph(cfg, weights), folder)
