"""Calibration set: draw texts whose token-length distribution matches the corpus.

Activation ranges depend on sequence length (longer inputs → more extreme attention outputs
and feed-forward activations), so a calibration set of short texts under-estimates ranges for
long traffic. We stratify on token-length *rank*: sort the corpus by length (ties broken at
random), cut it into ``strata`` equal-count slices (= the length quantiles), and draw the same
share from each. Rank-based strata stay well defined when many texts share one length, which
quantile *edges* do not. The trade-off: strata are equal-count, so a rare length tail inside
the last slice is represented in proportion, not over-sampled.

The set is split into a calibration part (observers) and a held-out part (the sensitivity
pass measures output error on texts the ranges were not fitted to).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_CALIBRATION_SAMPLES = 64  # fewer gives ranges that move by tens of % between draws
LENGTH_PERCENTILES = (10, 25, 50, 75, 90, 99, 100)


class CalibrationSetError(ValueError):
    """The calibration set is empty, too small, or cannot be drawn from the corpus."""


def check_calibration_size(n: int, min_samples: int = MIN_CALIBRATION_SAMPLES) -> None:
    """Refuse an empty or too-small calibration set with a message saying what to do."""
    if n <= 0:
        raise CalibrationSetError('calibration set is empty: pass a corpus with texts (JSONL lines like {"text": ...})')
    if n < min_samples:
        raise CalibrationSetError(
            f"calibration set has {n} samples, fewer than the minimum of {min_samples}: activation "
            f"ranges from so few texts are unstable; use 500-1000 samples (--samples) from a larger corpus"
        )


def stratified_sample(lengths: np.ndarray, n: int, strata: int = 10, seed: int = 0) -> np.ndarray:
    """Indices of ``n`` items whose length distribution follows ``lengths``'s quantiles.

    ``lengths`` (N,) → sorted int64 indices (n,), no repeats. Each of ``strata`` equal-count
    rank slices contributes ``n / strata`` items (remainders go to the first slices).
    """
    lengths = np.asarray(lengths)
    total = len(lengths)
    if n > total:
        raise CalibrationSetError(f"asked for {n} calibration samples but the corpus has only {total} texts")
    rng = np.random.default_rng(seed)
    # Sort by length, random among equal lengths: lexsort's last key is the primary one.
    order = np.lexsort((rng.random(total), lengths))
    slices = np.array_split(order, min(strata, n))
    quotas = [len(a) for a in np.array_split(np.arange(n), len(slices))]
    picked = [rng.choice(s, size=q, replace=False) for s, q in zip(slices, quotas, strict=True)]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def length_summary(lengths: np.ndarray) -> dict[str, float]:
    """Mean and percentiles of token lengths, e.g. ``{"n": 800, "mean": 24.1, "p50": 19, ...}``."""
    lengths = np.asarray(lengths, dtype=np.float64)
    out: dict[str, float] = {"n": float(len(lengths)), "mean": float(lengths.mean()) if len(lengths) else 0.0}
    for p in LENGTH_PERCENTILES:
        out[f"p{p}"] = float(np.percentile(lengths, p)) if len(lengths) else 0.0
    return out


def format_length_table(rows: dict[str, dict[str, float]]) -> str:
    """Side-by-side length distributions (one row per named set) as a fixed-width table."""
    keys = ["n", "mean"] + [f"p{p}" for p in LENGTH_PERCENTILES]
    header = f"{'tokens':<14}" + "".join(f"{k:>8}" for k in keys)
    lines = [header]
    for name, s in rows.items():
        cells = "".join(f"{s[k]:>8.0f}" if k != "mean" else f"{s[k]:>8.1f}" for k in keys)
        lines.append(f"{name:<14}{cells}")
    return "\n".join(lines)


@dataclass
class CalibrationSplit:
    """Indices into the corpus: texts for the observers and held-out texts for sensitivity."""

    calibrate: np.ndarray
    holdout: np.ndarray


def split_calibration(
    lengths: np.ndarray,
    samples: int,
    holdout_fraction: float = 0.2,
    min_samples: int = MIN_CALIBRATION_SAMPLES,
    seed: int = 0,
) -> CalibrationSplit:
    """Draw ``samples`` length-matched texts and split them into calibrate / held-out parts.

    Both parts are length-stratified (the held-out part is every k-th text in length order).
    The size check applies to the part that calibrates, the one the minimum is about.
    """
    check_calibration_size(len(lengths), min_samples)  # empty / too small corpus
    check_calibration_size(samples, min_samples)
    idx = stratified_sample(lengths, samples, seed=seed)
    by_length = idx[np.argsort(np.asarray(lengths)[idx], kind="stable")]
    step = max(2, round(1.0 / holdout_fraction))
    holdout = np.sort(by_length[::step])
    calibrate = np.sort(np.setdiff1d(idx, holdout))
    check_calibration_size(len(calibrate), min_samples)
    return CalibrationSplit(calibrate=calibrate, holdout=holdout)
