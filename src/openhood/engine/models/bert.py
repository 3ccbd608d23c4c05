"""Load a BERT-family sentence-embedding folder into an (unfused) op graph.

Reads ``config.json`` and ``model.safetensors`` with ``safetensors.numpy`` (never pickle: a
folder with only ``.bin``/``.pt`` weights is refused by ``openhood.formats.weights``), plus
the sentence-transformers files: ``1_Pooling/config.json`` (only mean pooling is supported,
others are refused), ``modules.json`` (is there a ``Normalize`` module?) and
``sentence_bert_config.json`` (``max_seq_length``). The graph is built in its plain textbook
form, one node per operation; ``engine.graph.fusion`` rewrites it for speed. ``head=False`` stops at
the token states (``token_embeddings``, (B*T, C)): that is what a served model runs, its
postprocessor pooling and normalizing (``openhood.models.pooling``); the full graph (with the
pooling head) is what export, quantization and the engine benchmarks compare. The trade-off: weights
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

from openhood.engine.graph.graph import Graph, Node
from openhood.engine.kernels.linear import Linear
from openhood.formats.errors import ModelFileError
from openhood.formats.weights import read_tensors


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

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _read_json(path: Path) -> Any:  # parsed JSON, or None when the file is absent
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_config(folder: Path) -> BertConfig:
    """The folder's sizes and sentence-transformers settings; ``ModelFileError`` naming the folder
    when a file is absent, not JSON, lacks a size, or asks for what the engine does not implement."""
    try:
        return _parse_config(folder)
    except KeyError as exc:
        raise ModelFileError(f"{folder / 'config.json'} has no {exc} entry") from None
    except (ValueError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
        raise ModelFileError(f"{folder}: {exc}") from None


def _parse_config(folder: Path) -> BertConfig:
    cfg = _read_json(folder / "config.json")
    if cfg is None:
        raise ValueError("no config.json")
    model_type = cfg.get("model_type", "bert")
    if model_type not in ("bert",):
        raise ValueError(f"model_type {model_type!r} is not supported: the NumPy engine implements BERT encoders")
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"hidden_act {act!r} is not supported (only exact-erf 'gelu')")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")

    pooling_cfg = _read_json(folder / "1_Pooling" / "config.json") or {"pooling_mode_mean_tokens": True}
    others = [
        k for k, v in pooling_cfg.items() if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"
    ]
    if others or not pooling_cfg.get("pooling_mode_mean_tokens", False):
        raise ValueError(
            f"only mean pooling is supported; 1_Pooling/config.json asks for {others or 'no mean pooling'}"
        )

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
    )


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """All tensors of ``model.safetensors`` as NumPy arrays, prefix ``bert.`` stripped (raises
    ``UnsafeModelFormatError`` for pickle-only folders)."""
    return read_tensors(folder, strip_prefix="bert.")


TOKEN_OUTPUT = "token_embeddings"  # (B*T, C): the last layer's states, the served model's output
POOLED_OUTPUT = "embedding"  # (B, C): after the pooling head (head=True)


def build_graph(cfg: BertConfig, w: dict[str, np.ndarray], head: bool = True) -> Graph:
    """The textbook BERT encoder as an unfused op graph; ``head`` adds mean pooling (+ L2
    normalize when the model has a Normalize module)."""

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
        Node(
            "embeddings.norm",
            "LayerNorm",
            ("emb.sum",),
            ("h.0",),
            {"eps": eps},
            {"gamma": t("embeddings.LayerNorm.weight"), "beta": t("embeddings.LayerNorm.bias")},
        ),
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
            Node(
                f"{p}.attention.self",
                "Attention",
                (f"{p}.q", f"{p}.k", f"{p}.v", "mask.bias"),
                (f"{p}.ctx",),
                {"heads": cfg.heads, "scale": scale},
            ),
            Node(
                f"{p}.attention.out",
                "Linear",
                (f"{p}.ctx",),
                (f"{p}.attn_proj",),
                linear=lin(f"{src}.attention.output.dense"),
            ),
            Node(f"{p}.attention.residual", "Add", (f"{p}.attn_proj", h), (f"{p}.attn_sum",)),
            Node(
                f"{p}.attention.norm",
                "LayerNorm",
                (f"{p}.attn_sum",),
                (f"{p}.attn",),
                {"eps": eps},
                {
                    "gamma": t(f"{src}.attention.output.LayerNorm.weight"),
                    "beta": t(f"{src}.attention.output.LayerNorm.bias"),
                },
            ),
            Node(f"{p}.ffn.up", "Linear", (f"{p}.attn",), (f"{p}.up",), linear=lin(f"{src}.intermediate.dense")),
            Node(f"{p}.ffn.act", "Gelu", (f"{p}.up",), (f"{p}.act",)),
            Node(f"{p}.ffn.down", "Linear", (f"{p}.act",), (f"{p}.down",), linear=lin(f"{src}.output.dense")),
            Node(f"{p}.ffn.residual", "Add", (f"{p}.down", f"{p}.attn"), (f"{p}.ffn_sum",)),
            Node(
                f"{p}.ffn.norm",
                "LayerNorm",
                (f"{p}.ffn_sum",),
                (f"h.{i + 1}",),
                {"eps": eps},
                {"gamma": t(f"{src}.output.LayerNorm.weight"), "beta": t(f"{src}.output.LayerNorm.bias")},
            ),
        ]
    last = f"h.{cfg.layers}"
    # token_outputs: the outputs that are per-token rows; their presence lets the Executor run
    # a padded batch padding-free (engine.graph.packing): every op here is row-wise except those that
    # read the (B, T) layout (Embeddings, Attention, MeanPool), which know the packed form.
    meta = {
        "hidden": cfg.hidden,
        "heads": cfg.heads,
        "layers": cfg.layers,
        "eps": eps,
        "fusions": [],
        "token_outputs": (),
    }
    if not head:
        # Rename the last state so the graph's output has a stable, architecture-free name.
        final = nodes[-1]
        nodes[-1] = Node(final.name, final.op, final.inputs, (TOKEN_OUTPUT,), final.attrs, final.params, final.linear)
        meta["token_outputs"] = (TOKEN_OUTPUT,)
        return Graph(nodes, ("input_ids", "attention_mask"), (TOKEN_OUTPUT,), meta)
    nodes.append(Node("pool", "MeanPool", (last, "attention_mask"), ("pooled" if cfg.normalize else POOLED_OUTPUT,)))
    if cfg.normalize:
        nodes.append(Node("normalize", "L2Normalize", ("pooled",), (POOLED_OUTPUT,)))
    return Graph(nodes, ("input_ids", "attention_mask"), (POOLED_OUTPUT,), meta)


@dataclass
class BertModel:
    config: BertConfig
    graph: Graph  # unfused
    folder: Path


def load_bert(folder: Path, head: bool = True, config: BertConfig | None = None) -> BertModel:
    """A resolved folder (``openhood.models.resolve_model_dir``) → config + unfused graph.
    Pass ``config`` when the caller already read it, so it is read once."""
    cfg = config or read_config(folder)
    return BertModel(cfg, build_graph(cfg, read_weights(folder), head=head), folder)
