"""Post-training quantization of the engine's graph: calibrate, measure sensitivity, plan.

The pipeline (``quantize``), on the fused fp32 graph the backends run:

1. **Weights**: every Linear weight → int8 codes per output channel (symmetric), and the
   vocabulary embedding table → int8 per row. Deterministic, no data needed.
2. **Calibration**: wrap each Linear in an ``ObservingLinear`` and run the calibration texts,
   grouped by exact length so no padding row reaches an observer (padding never reaches the
   pooled output, it would only widen ranges); each observer (min/max, percentile or MSE)
   proposes a range → a uint8 (scale, zero point).
3. **Sensitivity**: on *held-out* texts, quantize one layer at a time (static, then dynamic)
   with everything else fp32 and measure ``1 − cos`` of the output embedding against fp32.
   Layers run as ``Int8Linear(emulate=True)``, which reproduces ONNX Runtime's exact u8×u8
   integer arithmetic up to float rounding, so no ONNX session is built per trial.
4. **Plan**: start from the fastest plan (every layer static) and, while the held-out mean
   cosine is below the target, upgrade the layer that currently costs the most error by one
   step (static → dynamic when the run-time range removes most of its error, else → fp32).
   Upgrades are first made on the sum of single-layer errors (a good predictor), then the
   *combined* model is measured and upgraded one step at a time until it meets the target:
   greedy, not optimal, but interactions are measured and it stops at the first plan that
   meets the target — the fastest one it has seen.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from openhood.engine.graph.graph import Graph
from openhood.engine.graph.runtime import Executor
from openhood.engine.quant.calibration import check_calibration_size
from openhood.engine.quant.evaluate import cosine_rows
from openhood.engine.quant.linear import ObservingLinear
from openhood.engine.quant.observers import ChannelAbsMaxObserver, ScaledObserver, TeeObserver, Watcher, make_observer
from openhood.engine.quant.ops import quantize_weight, smoothing_factors
from openhood.engine.quant.plan import EMBEDDING_NODE, Codes, EmbeddingCodes, LayerPlan, apply_plan, with_ranges

# Static saves the run-time min/max pass over the activation; prefer dynamic only when it
# removes at least this share of the layer's static error.
DYNAMIC_GAIN = 0.5
# Plan on the additive prediction down to this share of the error budget (1 - target), then
# measure: the prediction is slightly optimistic when many layers are quantized.
PREDICTION_MARGIN = 0.9
# 7-bit weight codes by default: measured on this AVX2 machine (MiniLM, batch 32, same plan) the
# u8×s8 kernel they allow is 1.38× fp32 vs 1.25× for exact 8-bit codes on u8×u8, for ~1e-3 cosine.
WEIGHT_QMAX = 63


@dataclass
class QuantResult:
    decisions: list[LayerPlan]
    codes: Codes  # every Linear
    embedding: EmbeddingCodes | None
    holdout_quality: dict[str, float]
    steps: list[str] = field(default_factory=list)
    smooth: dict[str, np.ndarray] = field(default_factory=dict)  # layer → factors s (in,), smoothed layers only

    def plan_json(self) -> dict[str, Any]:
        """The plan as plain JSON types (stored in the safetensors metadata)."""
        return {
            "layers": {d.layer: {k: v for k, v in asdict(d).items() if k != "layer"} for d in self.decisions},
            "embedding_int8": self.embedding is not None,
            "holdout_quality": self.holdout_quality,
            "steps": self.steps,
        }


def length_groups(seqs: Sequence[np.ndarray], batch: int = 32) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token id arrays → unpadded batches: each batch holds texts of exactly one length."""
    by_len: dict[int, list[np.ndarray]] = {}
    for s in seqs:
        by_len.setdefault(len(s), []).append(np.asarray(s, dtype=np.int64))
    out = []
    for n in sorted(by_len):
        group = by_len[n]
        for i in range(0, len(group), batch):
            ids = np.stack(group[i : i + batch])  # (B, n)
            out.append((ids, np.ones_like(ids)))
    return out


def padded_batches(seqs: Sequence[np.ndarray], batch: int = 32, *, pad_id: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token id arrays → batches padded to their longest with the tokenizer's ``pad_id`` (input
    order kept), through the one padding function, ``RaggedBatch.pad``."""
    from openhood.tokenizer.batch import RaggedBatch

    out = []
    for i in range(0, len(seqs), batch):
        chunk = [np.asarray(s) for s in seqs[i : i + batch]]
        lengths = np.array([len(s) for s in chunk], dtype=np.int64)
        padded = RaggedBatch(np.concatenate(chunk), lengths, np.zeros(len(chunk), dtype=bool), pad_id=pad_id).pad()
        out.append((padded.input_ids, padded.attention_mask))  # (B, T) each
    return out


def run_graph(graph: Graph, batches: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Embeddings (N, dim) of every batch through the NumPy engine."""
    with Executor(graph) as ex:
        out_name = graph.outputs[0]
        return np.concatenate([ex.run({"input_ids": ids, "attention_mask": mask})[out_name] for ids, mask in batches])


def calibrate(
    graph: Graph,
    seqs: Sequence[np.ndarray],
    method: str = "percentile",
    tick: Callable[[int, int], None] | None = None,
    inv_smooth: dict[str, np.ndarray] | None = None,
    channel_absmax: dict[str, np.ndarray] | None = None,
) -> dict[str, tuple[float, float]]:
    """Layer name → (lo, hi) range of its input over ``seqs``, by observer ``method``.

    ``inv_smooth`` (layer → 1/s): observe the smoothed input ``x / s`` of the layers it names.
    ``channel_absmax``: a dict this fills with each layer's per-channel max |x| (in,).
    """
    names = list(graph.linears())
    observers = {n: make_observer(method) for n in names}
    channel = {n: ChannelAbsMaxObserver() for n in names}
    g_obs = graph.clone()
    for n in names:
        obs: Watcher = (
            observers[n] if inv_smooth is None or n not in inv_smooth else ScaledObserver(observers[n], inv_smooth[n])
        )
        if channel_absmax is not None:
            obs = TeeObserver(obs, channel[n])
        g_obs.replace_linear(n, ObservingLinear(graph.node(n).linear, obs))
    batches = length_groups(seqs)  # unpadded: padding rows would widen the ranges for nothing
    with Executor(g_obs) as ex:
        for i, (ids, mask) in enumerate(batches):
            ex.run({"input_ids": ids, "attention_mask": mask})
            if tick:
                tick(i + 1, len(batches))
    if channel_absmax is not None:
        channel_absmax.update({n: channel[n].result() for n in names})
    return {n: observers[n].range() for n in names}


@dataclass
class Variants:
    """Each layer's int8 forms: plain codes and range, and (when smoothing is tried) its
    SmoothQuant factors with the codes and range of the smoothed weight and input."""

    codes: Codes
    ranges: dict[str, tuple[float, float]]  # layer → calibrated input range
    factors: dict[str, np.ndarray] = field(default_factory=dict)  # layer → s (in,)
    smooth_codes: Codes = field(default_factory=dict)
    smooth_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)


def quantize_weights(graph: Graph, weight_qmax: int) -> Codes:
    """Every Linear weight → int8 codes per output channel (symmetric): (out, in), (out,)."""
    return {n: quantize_weight(lin.weight.T, axis=0, qmax=weight_qmax) for n, lin in graph.linears().items()}


def quantize_embedding_table(graph: Graph) -> EmbeddingCodes | None:
    """The vocabulary table int8 per row ((V, D), (V,)), or None for a graph without one."""
    if EMBEDDING_NODE not in {n.name for n in graph.nodes}:
        return None
    return quantize_weight(graph.node(EMBEDDING_NODE).params["word"], axis=0)


def calibrate_variants(
    graph: Graph,
    calibration: Sequence[np.ndarray],
    method: str,
    weight_qmax: int,
    smooth_alpha: float,
    progress: Callable[[str, int], Callable[[int, int], None] | None],
) -> Variants:
    """Codes and calibrated ranges of every layer; with ``smooth_alpha`` also the smoothed
    variant (a second calibration pass: its factors need the first pass's channel maxima)."""
    absmax: dict[str, np.ndarray] = {}
    ranges = calibrate(
        graph, calibration, method, progress("calibrate", 0), channel_absmax=absmax if smooth_alpha else None
    )
    variants = Variants(quantize_weights(graph, weight_qmax), ranges)
    if smooth_alpha:
        for n, lin in graph.linears().items():
            variants.factors[n] = smoothing_factors(absmax[n], lin.weight, smooth_alpha)  # (in,)
            variants.smooth_codes[n] = quantize_weight(
                (lin.weight * variants.factors[n][:, None]).T, axis=0, qmax=weight_qmax
            )
        variants.smooth_ranges = calibrate(
            graph,
            calibration,
            method,
            progress("calibrate smoothed", 0),
            inv_smooth={n: 1.0 / f for n, f in variants.factors.items()},
        )
    return variants


class Trials:
    """Runs a plan in emulation on the held-out texts and measures 1 − cos against fp32."""

    def __init__(
        self,
        graph: Graph,
        holdout: Sequence[np.ndarray],
        variants: Variants,
        plans: dict[str, LayerPlan],
        embedding: EmbeddingCodes | None,
        pad_id: int,
    ):
        self.graph, self.variants, self.plans, self.embedding = graph, variants, plans, embedding
        self.batches = padded_batches(sorted(holdout, key=len), pad_id=pad_id)
        self.reference = run_graph(graph, self.batches)  # (n_hold, dim)

    def decisions(self, modes: dict[str, str], smoothed: dict[str, bool]) -> tuple[list[LayerPlan], Codes]:
        """Each layer's record with the chosen mode and its variant's range; the matching codes."""
        ds, cs = [], dict(self.variants.codes)
        for n, plan in self.plans.items():
            sm = bool(smoothed.get(n))
            d = LayerPlan(**{**asdict(plan), "mode": modes.get(n, "fp32"), "smooth": sm})
            ds.extend(with_ranges([d], {n: self.variants.smooth_ranges[n]}) if sm else [d])
            if sm:
                cs[n] = self.variants.smooth_codes[n]
        return ds, cs

    def error(
        self, modes: dict[str, str], embedding: bool = False, smoothed: dict[str, bool] | None = None
    ) -> np.ndarray:
        """Per held-out text 1 − cos (n_hold,) of the plan ``modes`` (layers not named: fp32)."""
        ds, cs = self.decisions(modes, smoothed or {})
        g = apply_plan(
            self.graph, ds, cs, self.embedding if embedding else None, emulate=True, smooth=self.variants.factors
        )
        return 1.0 - cosine_rows(self.reference, run_graph(g, self.batches))


def measure_sensitivity(
    trials: Trials, smooth_alpha: float, progress: Callable[[str, int], Callable[[int, int], None] | None]
) -> None:
    """Fill each plan's errors: the layer alone static, alone dynamic (and both smoothed)."""
    plans = trials.plans
    n_trials = 4 if smooth_alpha else 2
    tick = progress("sensitivity", n_trials * len(plans))
    for i, n in enumerate(plans):
        plans[n].static_error = float(trials.error({n: "static"}).mean())
        plans[n].dynamic_error = float(trials.error({n: "dynamic"}).mean())
        if smooth_alpha:
            plans[n].smooth_static_error = float(trials.error({n: "static"}, False, {n: True}).mean())
            plans[n].smooth_dynamic_error = float(trials.error({n: "dynamic"}, False, {n: True}).mean())
        if tick:
            tick(n_trials * (i + 1), n_trials * len(plans))


def variant(plan: LayerPlan, mode: str) -> tuple[float, bool]:
    """(error, smoothed) of the better variant (plain or smoothed) of a layer in ``mode``."""
    plain = plan.static_error if mode == "static" else plan.dynamic_error
    smoothed = plan.smooth_static_error if mode == "static" else plan.smooth_dynamic_error
    return (smoothed, True) if smoothed is not None and smoothed < plain else (plain, False)


def layer_cost(plans: dict[str, LayerPlan], modes: dict[str, str], n: str) -> float:
    """Measured single-layer error of layer ``n`` in its current mode (fp32: none)."""
    return 0.0 if modes[n] == "fp32" else variant(plans[n], modes[n])[0]


def smoothed_layers(plans: dict[str, LayerPlan], modes: dict[str, str]) -> dict[str, bool]:
    """Layer → whether its current mode uses the smoothed variant."""
    return {n: modes[n] != "fp32" and variant(plans[n], modes[n])[1] for n in plans}


def upgrade(plans: dict[str, LayerPlan], modes: dict[str, str], target_cosine: float) -> bool:
    """Move the costliest quantized layer one step up (static → dynamic when a run-time range
    removes most of its error, else → fp32) and record why; False when none is left."""
    candidates = [n for n in plans if modes[n] != "fp32"]
    if not candidates:
        return False
    worst = max(candidates, key=lambda n: layer_cost(plans, modes, n))
    p = plans[worst]
    static_err, dynamic_err = variant(p, "static")[0], variant(p, "dynamic")[0]
    if modes[worst] == "static" and dynamic_err <= DYNAMIC_GAIN * static_err:
        modes[worst] = "dynamic"
        p.reason = (
            f"dynamic: largest remaining error with a static range ({static_err:.1e}); "
            f"a run-time range cuts it to {dynamic_err:.1e}"
        )
    else:
        was, cost = modes[worst], layer_cost(plans, modes, worst)
        modes[worst] = "fp32"
        p.reason = (
            f"fp32: largest remaining error as {was} ({cost:.1e}; static {static_err:.1e}, "
            f"dynamic {dynamic_err:.1e}) while the plan was below target {target_cosine}"
        )
    return True


def greedy_plan(
    trials: Trials, target_cosine: float, embedding_error: float, smooth_alpha: float, log: Callable[[str], None]
) -> tuple[dict[str, str], list[str], float, float]:
    """Modes from all-static upward until the measured held-out mean cosine meets the target;
    returns (modes, one line per measured plan, cos mean, cos min) of the last plan.

    Per-layer errors add up almost linearly (measured on MiniLM: the sum of the 24 single-layer
    static errors was within 2% of the all-static error), so upgrades are first chosen on that
    prediction, then confirmed one measured step at a time."""
    plans = trials.plans
    modes = {n: "static" for n in plans}
    for p in plans.values():
        p.reason = "static: calibrated range, plan met the target without changing it"
    steps: list[str] = []

    def predicted_error() -> float:
        return embedding_error + sum(layer_cost(plans, modes, n) for n in plans)

    while predicted_error() > PREDICTION_MARGIN * (1.0 - target_cosine) and upgrade(plans, modes, target_cosine):
        pass
    while True:
        smoothed = smoothed_layers(plans, modes)
        err = trials.error(modes, trials.embedding is not None, smoothed)
        cos_mean, cos_min = 1.0 - float(err.mean()), 1.0 - float(err.max())
        count = {m: sum(v == m for v in modes.values()) for m in ("static", "dynamic", "fp32")}
        steps.append(
            f"{count['static']} static / {count['dynamic']} dynamic / {count['fp32']} fp32"
            f"{f' ({sum(smoothed.values())} smoothed)' if smooth_alpha else ''} → held-out cos "
            f"mean {cos_mean:.5f} (predicted {1.0 - predicted_error():.5f}) min {cos_min:.5f}"
        )
        log("plan: " + steps[-1])
        if cos_mean >= target_cosine or not upgrade(plans, modes, target_cosine):
            return modes, steps, cos_mean, cos_min


def quantize(
    graph: Graph,
    calibration: Sequence[np.ndarray],
    holdout: Sequence[np.ndarray],
    method: str = "percentile",
    *,
    pad_id: int,
    target_cosine: float = 0.99,
    quantize_embedding: bool = True,
    weight_qmax: int = WEIGHT_QMAX,
    min_samples: int = 1,
    smooth_alpha: float = 0.0,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    progress: Callable[[str, int], Callable[[int, int], None] | None] = lambda label, total: None,
) -> QuantResult:
    """Quantize the fused fp32 ``graph`` to meet ``target_cosine`` (held-out mean) at best speed.

    ``calibration`` / ``holdout``: token id arrays (one per text, [CLS] … [SEP]).
    ``weight_qmax``: 63 (7-bit codes, default) runs ORT's fast u8×s8 kernel without int16
    saturation on AVX2; 127 (8-bit) is more accurate but needs the ~10% slower u8×u8 kernel.
    ``smooth_alpha`` > 0: also try every layer with SmoothQuant factors of that alpha (its own
    codes and calibrated ranges) and keep, per layer and mode, whichever variant measured the
    smaller error; 0 skips smoothing (half the sensitivity trials).
    The sensitivity pass measures the codes actually stored, so the plan accounts for either.
    """
    check_calibration_size(len(calibration), min_samples)
    check_calibration_size(len(holdout), 1)
    variants = calibrate_variants(graph, calibration, method, weight_qmax, smooth_alpha, progress)
    embedding = quantize_embedding_table(graph) if quantize_embedding else None
    # One record per layer (errors, reason); ranges and codes per variant live in ``variants``.
    names = list(graph.linears())
    blank = [LayerPlan(n, "static", "", 0.0, 0.0, variants.ranges[n], 0.0, 0) for n in names]
    trials = Trials(
        graph, holdout, variants, {d.layer: d for d in with_ranges(blank, variants.ranges)}, embedding, pad_id
    )
    measure_sensitivity(trials, smooth_alpha, progress)
    embedding_error = float(trials.error({}, True).mean()) if embedding is not None else 0.0
    if embedding is not None:
        log(f"sensitivity: int8 embedding table alone costs mean 1-cos {embedding_error:.1e}")
    modes, steps, cos_mean, cos_min = greedy_plan(trials, target_cosine, embedding_error, smooth_alpha, log)
    smoothed = smoothed_layers(trials.plans, modes)
    for n in names:
        if smoothed[n]:
            trials.plans[n].reason += " (with SmoothQuant factors: smaller measured error)"
    decisions, final_codes = trials.decisions(modes, smoothed)
    quality = {"cos_mean": cos_mean, "cos_min": cos_min, "texts": float(len(holdout))}
    return QuantResult(
        decisions, final_codes, embedding, quality, steps, {n: variants.factors[n] for n in names if smoothed[n]}
    )


def format_decisions(decisions: Sequence[LayerPlan]) -> str:
    """The per-layer plan as a table: layer, mode, both sensitivities, calibrated range, why."""
    tried = any(d.smooth_static_error is not None for d in decisions)
    head = f"{'layer':<26}{'mode':<16}{'err static':>11}{'err dyn':>10}"
    head += f"{'smooth st':>11}{'smooth dyn':>11}" if tried else ""
    lines = [head + f"{'input range':>20}  why"]
    for d in decisions:
        rng = f"[{d.input_range[0]:.1f}, {d.input_range[1]:.1f}]"
        mode = d.mode + ("+smooth" if d.smooth else "")
        row = f"{d.layer:<26}{mode:<16}{d.static_error:>11.1e}{d.dynamic_error:>10.1e}"
        if tried:
            row += f"{d.smooth_static_error or 0:>11.1e}{d.smooth_dynamic_error or 0:>11.1e}"
        lines.append(row + f"{rng:>20}  {d.reason}")
    return "\n".join(lines)
