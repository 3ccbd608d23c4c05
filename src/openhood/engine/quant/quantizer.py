"""Post-training quantization of an fp32 ONNX graph: calibrate, measure sensitivity, plan.

The pipeline (``quantize``):

1. **Weights**: every Linear weight → int8 codes per output channel (symmetric), and the
   vocabulary embedding table → int8 per row. Deterministic, no data needed.
2. **Calibration**: run the fp32 graph on the calibration texts with each Linear layer's input
   exposed, feed real-token values to one observer per tensor (min/max, percentile or MSE),
   turn each range into a uint8 (scale, zero point).
3. **Sensitivity**: on *held-out* texts, quantize one layer at a time (static, then dynamic)
   with everything else fp32 and measure ``1 − cos`` of the output embedding against fp32.
   This runs on ONNX Runtime itself, so kernel effects (saturation, rounding) are included.
4. **Plan**: start from the fastest plan (every layer static) and, while the held-out mean
   cosine is below the target, upgrade the layer that currently costs the most error one step
   (static → dynamic when dynamic removes most of its error, else → fp32). Greedy, not optimal:
   it evaluates the *combined* model after each step, so interactions are measured, and it
   stops at the first plan meeting the target, which is the fastest one it has seen.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from openhood.engine.quant.calibration import check_calibration_size
from openhood.engine.quant.evaluate import Batch, cosine_rows, embed_batches, make_session, observe_activations
from openhood.engine.quant.observers import make_observer
from openhood.engine.quant.ops import activation_qparams, quantize_weight
from openhood.export.qdq import LayerQuant, embedding_sites, linear_sites, quantize_graph

# Static beats dynamic by a small margin (no run-time min/max pass); take dynamic only when
# it removes at least this share of the layer's static error.
DYNAMIC_GAIN = 0.5


@dataclass
class LayerDecision:
    """One Linear layer's chosen mode and the measurements behind it."""

    layer: str
    mode: str
    reason: str
    static_error: float  # mean 1 − cos on held-out texts, this layer alone static
    dynamic_error: float  # same, this layer alone dynamic
    input_range: tuple[float, float]
    input_scale: float
    input_zero_point: int


@dataclass
class QuantResult:
    """Everything ``quantize`` produced: the int8 ONNX graph and what it was built from."""

    model: onnx.ModelProto
    layers: dict[str, LayerQuant]
    embeddings: dict[str, tuple[np.ndarray, np.ndarray]]
    decisions: list[LayerDecision]
    holdout_quality: dict[str, float]
    steps: list[str] = field(default_factory=list)

    def plan_json(self) -> dict:
        """The per-layer plan as plain JSON types (stored in safetensors metadata)."""
        return {
            "layers": {d.layer: {k: v for k, v in asdict(d).items() if k != "layer"} for d in self.decisions},
            "embeddings": sorted(self.embeddings),
            "holdout_quality": self.holdout_quality,
            "steps": self.steps,
        }


def quantize_weights(model: onnx.ModelProto) -> tuple[dict[str, LayerQuant], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Int8 codes for every Linear weight (out, in) and vocabulary table (V, D), per row."""
    inits = {t.name: t for t in model.graph.initializer}
    layers = {}
    for site in linear_sites(model):
        w = numpy_helper.to_array(inits[site.weight])  # (in, out)
        codes, scale = quantize_weight(w.T, axis=0)  # (out, in), (out,)
        layers[site.layer] = LayerQuant("fp32", codes, scale)
    embeddings = {}
    for site in embedding_sites(model):
        table = numpy_helper.to_array(inits[site.table])  # (V, D)
        embeddings[site.layer] = quantize_weight(table, axis=0)
    return layers, embeddings


def _with_modes(base: dict[str, LayerQuant], modes: dict[str, str]) -> dict[str, LayerQuant]:
    return {name: LayerQuant(modes.get(name, "fp32"), lq.codes, lq.scale, lq.input_scale, lq.input_zero_point) for name, lq in base.items()}


def quantize(
    model: onnx.ModelProto,
    calibration: Sequence[Batch],
    holdout: Sequence[Batch],
    method: str = "percentile",
    target_cosine: float = 0.99,
    weight_encoding: str = "u8",
    quantize_embeddings: bool = True,
    min_samples: int = 1,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    progress: Callable[[str, int], Callable[[int, int], None]] | None = None,
) -> QuantResult:
    """Quantize ``model`` (fp32 ONNX) to meet ``target_cosine`` (held-out mean) at best speed.

    ``calibration`` / ``holdout``: padded token batches. ``min_samples`` counts texts.
    """
    n_cal = sum(len(ids) for ids, _ in calibration)
    n_hold = sum(len(ids) for ids, _ in holdout)
    check_calibration_size(n_cal, min_samples)
    check_calibration_size(n_hold, 1)
    bar = progress or (lambda label, total: None)

    layers, embeddings = quantize_weights(model)
    if not quantize_embeddings:
        embeddings = {}
    sites = linear_sites(model)

    # 2. Calibration: one observer per distinct activation tensor.
    observers = {s.activation: make_observer(method) for s in sites}
    observe_activations(model, calibration, observers, bar("calibrate", len(calibration)))
    ranges = {}
    for s in sites:
        lo, hi = observers[s.activation].range()
        scale, zp = activation_qparams(lo, hi)
        layers[s.layer].input_scale, layers[s.layer].input_zero_point = float(scale), int(zp)
        ranges[s.layer] = (lo, hi)

    # 3. Sensitivity, on held-out texts.
    reference = embed_batches(make_session(model), holdout)  # (n_hold, dim)

    def error(modes: dict[str, str], emb: bool) -> np.ndarray:
        q = quantize_graph(model, _with_modes(layers, modes), embeddings if emb else None, weight_encoding)
        return 1.0 - cosine_rows(reference, embed_batches(make_session(q), holdout))

    names = [s.layer for s in sites]
    sens: dict[str, dict[str, float]] = {}
    tick = bar("sensitivity", 2 * len(names))
    for i, name in enumerate(names):
        sens[name] = {m: float(error({name: m}, False).mean()) for m in ("static", "dynamic")}
        if tick:
            tick(i * 2 + 2, 2 * len(names))
    if embeddings:
        log(f"sensitivity: int8 embedding table alone → mean 1-cos {error({}, True).mean():.2e}")

    # 4. Greedy plan.
    modes = {n: "static" for n in names}
    reasons = {n: "static: within target with calibrated range" for n in names}
    steps = []
    while True:
        err = error(modes, True)
        cos_mean, cos_min = 1.0 - float(err.mean()), 1.0 - float(err.max())
        n_by = {m: sum(v == m for v in modes.values()) for m in ("static", "dynamic", "fp32")}
        steps.append(f"{n_by['static']} static / {n_by['dynamic']} dynamic / {n_by['fp32']} fp32 → held-out cos mean {cos_mean:.5f} min {cos_min:.5f}")
        log("plan: " + steps[-1])
        if cos_mean >= target_cosine:
            break
        candidates = [n for n in names if modes[n] != "fp32"]
        if not candidates:
            break
        worst = max(candidates, key=lambda n: sens[n][modes[n]])
        if modes[worst] == "static" and sens[worst]["dynamic"] <= DYNAMIC_GAIN * sens[worst]["static"]:
            modes[worst] = "dynamic"
            reasons[worst] = (
                f"dynamic: static range costs {sens[worst]['static']:.1e} (largest remaining), "
                f"run-time range cuts it to {sens[worst]['dynamic']:.1e}"
            )
        else:
            modes[worst] = "fp32"
            reasons[worst] = (
                f"fp32: largest remaining error (static {sens[worst]['static']:.1e} / dynamic "
                f"{sens[worst]['dynamic']:.1e}) while the plan was below target {target_cosine}"
            )
    final = _with_modes(layers, modes)
    decisions = [
        LayerDecision(n, modes[n], reasons[n], sens[n]["static"], sens[n]["dynamic"], ranges[n], final[n].input_scale, final[n].input_zero_point)
        for n in names
    ]
    q = quantize_graph(model, final, embeddings, weight_encoding)
    return QuantResult(q, final, embeddings, decisions, {"cos_mean": cos_mean, "cos_min": cos_min, "texts": n_hold}, steps)


def format_decisions(decisions: Sequence[LayerDecision]) -> str:
    """The per-layer plan as a table: layer, mode, both sensitivities, calibrated range, why."""
    lines = [f"{'layer':<28}{'mode':<9}{'err static':>11}{'err dyn':>10}{'range':>22}  why"]
    for d in decisions:
        rng = f"[{d.input_range[0]:.2f}, {d.input_range[1]:.2f}]"
        lines.append(f"{d.layer:<28}{d.mode:<9}{d.static_error:>11.1e}{d.dynamic_error:>10.1e}{rng:>22}  {d.reason}")
    return "\n".join(lines)
