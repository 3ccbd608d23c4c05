"""An int8 plan as data and as a graph: per-layer decisions, and applying them to the engine graph.

``LayerPlan`` is one Linear layer's decision (static / dynamic / fp32, its activation range,
SmoothQuant or not) with the measurements behind it. ``apply_plan`` swaps the layers of a fused
fp32 graph for ``Int8Linear`` objects from (decisions, codes, factors) — the one place that
turns a plan into a graph, used by the quantizer's sensitivity pass, by ``storage.apply_int8``
for a saved plan, and by the calibration experiment in ``benchmarks/precision.py``. The
trade-off: plans are plain dataclasses and dicts of arrays, so the same function serves the
in-memory search and the file on disk, at the cost of passing four dicts around.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from openhood.engine.graph.graph import Graph
from openhood.engine.quant.linear import Int8Linear
from openhood.engine.quant.ops import activation_qparams, dequantize_weight

EMBEDDING_NODE = "embeddings"

# layer → (int8 codes (out, in), per-output-channel scale (out,))
Codes = dict[str, tuple[np.ndarray, np.ndarray]]
# the vocabulary table int8 per row: (codes (V, D), row scale (V,))
EmbeddingCodes = tuple[np.ndarray, np.ndarray]


@dataclass
class LayerPlan:
    """One Linear layer's chosen mode, its int8 data, and the measurements behind it."""

    layer: str
    mode: str  # "static" | "dynamic" | "fp32"
    reason: str
    static_error: float  # mean 1 − cos on held-out texts, this layer alone static
    dynamic_error: float  # same, this layer alone dynamic
    input_range: tuple[float, float]
    input_scale: float
    input_zero_point: int
    smooth: bool = False  # SmoothQuant factors applied (stored beside the codes)
    smooth_static_error: float | None = None  # the two errors again with smoothing (None: not tried)
    smooth_dynamic_error: float | None = None


def int8_embedding_params(params: dict[str, Any], codes: np.ndarray, scale: np.ndarray) -> dict[str, Any]:
    """Embeddings params with the vocabulary table int8 per row: ``word_int8`` (V, D) and
    ``word_scale`` (V,) for the ONNX exporter, ``word`` dequantized for the NumPy kernel."""
    return dict(
        params, word=dequantize_weight(codes, scale, axis=0), word_int8=codes, word_scale=scale.astype(np.float32)
    )


def apply_plan(
    graph: Graph,
    decisions: Sequence[LayerPlan],
    codes: Codes,
    embedding: EmbeddingCodes | None = None,
    emulate: bool = False,
    weight_encoding: str = "auto",
    smooth: dict[str, np.ndarray] | None = None,
) -> Graph:
    """A copy of ``graph`` with each non-fp32 layer swapped for an ``Int8Linear`` (and the
    embedding table replaced by its dequantized int8 version when given). A decision with
    ``smooth`` takes its factors from ``smooth`` (and ``codes`` must hold its smoothed codes)."""
    g = graph.clone()
    for d in decisions:
        if d.mode == "fp32":
            continue
        q, s = codes[d.layer]
        bias = g.node(d.layer).linear.bias
        factors = smooth[d.layer] if d.smooth and smooth is not None else None
        g.replace_linear(
            d.layer,
            Int8Linear(q, s, bias, d.mode, d.input_scale, d.input_zero_point, emulate, weight_encoding, smooth=factors),
        )
    if embedding is not None:
        node = g.node(EMBEDDING_NODE)
        node.params = int8_embedding_params(node.params, *embedding)
    return g


def with_ranges(decisions: Sequence[LayerPlan], ranges: dict[str, tuple[float, float]]) -> list[LayerPlan]:
    """The same per-layer modes with activation qparams recomputed from other ``ranges``."""
    out = []
    for d in decisions:
        s, z = activation_qparams(*ranges[d.layer])
        out.append(
            LayerPlan(
                **{**asdict(d), "input_range": ranges[d.layer], "input_scale": float(s), "input_zero_point": int(z)}
            )
        )
    return out
