"""Calibration observers: watch a tensor over many batches, then propose a (lo, hi) range.

Three methods, selectable by name (``make_observer``):

- ``minmax``: the extremes seen. Never clips, but one outlier (BERT has a few huge activations
  into the feed-forward output) stretches the scale and wastes most of the 256 codes.
- ``percentile``: cut the tails at e.g. the 99.99th percentile of the values seen: a few
  outliers get clipped, everything else gets finer steps.
- ``mse``: choose the clipping range that minimizes the expected squared error of
  quantize→dequantize over the observed distribution: the trade between clipping error
  (outside the range) and rounding error (``scale²/12`` inside it), measured, not guessed.

Percentile and MSE work on a streaming histogram (2048 bins) so memory stays constant however
many samples are observed. When new data falls outside the current bins, the range grows and
the old counts are re-binned at their bin centres — an approximation of at most one old bin
width, which is far below the uint8 step (``range / 255``) for 2048 bins.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from openhood.engine.quant.ops import UINT8_MAX

METHODS = ("minmax", "percentile", "mse")


class Watcher(Protocol):
    """Anything fed the activations a calibrated layer sees (``ObservingLinear`` calls it)."""

    def update(self, x: np.ndarray) -> None: ...


class RangeObserver(Watcher, Protocol):
    """A watcher that proposes a (lo, hi) activation range from what it saw."""

    def range(self) -> tuple[float, float]: ...


class MinMaxObserver:
    """Running min and max."""

    def __init__(self) -> None:
        self.lo = np.inf
        self.hi = -np.inf
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        self.lo = min(self.lo, float(np.min(x)))
        self.hi = max(self.hi, float(np.max(x)))
        self.count += int(x.size)

    def range(self) -> tuple[float, float]:
        if self.count == 0:
            raise ValueError("observer saw no data: run calibration batches before asking for a range")
        return self.lo, self.hi


class HistogramObserver(MinMaxObserver):
    """Min/max plus a streaming histogram of every value seen; base of percentile and MSE."""

    def __init__(self, bins: int = 2048) -> None:
        super().__init__()
        self.bins = bins
        self.counts = np.zeros(bins, dtype=np.float64)
        self.edges: np.ndarray | None = None  # (bins + 1,)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float32).ravel()
        if x.size == 0:
            return
        super().update(x)
        lo, hi = self.lo, self.hi
        if hi == lo:  # a constant tensor so far: give the bins a non-zero width
            hi = lo + 1e-6
        if self.edges is None:
            self.edges = np.linspace(lo, hi, self.bins + 1)
        elif lo < self.edges[0] or hi > self.edges[-1]:
            # Grow the range and re-bin old counts at their centres.
            centres = 0.5 * (self.edges[:-1] + self.edges[1:])
            self.edges = np.linspace(min(lo, self.edges[0]), max(hi, self.edges[-1]), self.bins + 1)
            self.counts, _ = np.histogram(centres, bins=self.edges, weights=self.counts)
        hist, _ = np.histogram(x, bins=self.edges)
        self.counts += hist

    def _centres(self) -> np.ndarray:
        assert self.edges is not None
        centres: np.ndarray = 0.5 * (self.edges[:-1] + self.edges[1:])
        return centres


class PercentileObserver(HistogramObserver):
    """Range = [p_low, p_high] quantiles of the values seen (default 0.01% cut on each side)."""

    def __init__(self, percentile: float = 99.99, bins: int = 2048) -> None:
        if not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        super().__init__(bins)
        self.percentile = percentile

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if self.percentile == 100.0 or self.edges is None:
            return lo, hi
        cdf = np.cumsum(self.counts) / self.counts.sum()  # (bins,)
        q = self.percentile / 100.0
        lo_bin = int(np.searchsorted(cdf, 1.0 - q, side="left"))
        hi_bin = int(np.searchsorted(cdf, q, side="left"))
        # Lower edge of the low bin, upper edge of the high bin: never cut inside a bin.
        return max(lo, float(self.edges[lo_bin])), min(hi, float(self.edges[hi_bin + 1]))


class MSEObserver(HistogramObserver):
    """Range minimizing expected quantize→dequantize squared error over the histogram.

    Candidates clip each tail independently at 64 histogram quantiles (a 64×64 grid). For a
    candidate [a, b] with step s = (b − a)/255, a value v inside costs s²/12 (uniform rounding
    error) and a value outside costs its squared distance to the nearest end.
    """

    def __init__(self, bins: int = 2048, grid: int = 64) -> None:
        super().__init__(bins)
        self.grid = grid

    def expected_error(self, a: float, b: float) -> float:
        """Expected squared error per value for range [a, b] under the observed histogram."""
        c, n = self._centres(), self.counts
        step = (max(b, 0.0) - min(a, 0.0)) / UINT8_MAX
        clipped = np.clip(c, a, b)
        err = np.where((c >= a) & (c <= b), step * step / 12.0, (c - clipped) ** 2)
        return float(np.sum(err * n) / n.sum())

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if self.edges is None or hi == lo:
            return lo, hi
        cdf = np.cumsum(self.counts) / self.counts.sum()
        # Tail masses from 0 up to 1e-2, log-spaced: the interesting cuts are very small.
        tails = np.concatenate([[0.0], np.logspace(-7, -2, self.grid - 1)])
        lows = [lo] + [float(self.edges[np.searchsorted(cdf, t)]) for t in tails[1:]]
        highs = [hi] + [float(self.edges[np.searchsorted(cdf, 1.0 - t) + 1]) for t in tails[1:]]
        best = (np.inf, lo, hi)
        for a in lows:
            for b in highs:
                if b <= a:
                    continue
                e = self.expected_error(a, b)
                if e < best[0]:
                    best = (e, a, b)
        return best[1], best[2]


class ChannelAbsMaxObserver:
    """max |x| per input channel (the last axis) over every row seen: SmoothQuant's statistic."""

    def __init__(self) -> None:
        self.absmax: np.ndarray | None = None  # (in,)

    def update(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        m = np.max(np.abs(x.reshape(-1, x.shape[-1])), axis=0)  # (in,)
        self.absmax = m if self.absmax is None else np.maximum(self.absmax, m)

    def result(self) -> np.ndarray:
        if self.absmax is None:
            raise ValueError("observer saw no data: run calibration batches before asking for channel maxima")
        return self.absmax


class ScaledObserver:
    """Feeds ``x * inv_smooth`` (the smoothed activation an int8 layer will quantize) to ``inner``."""

    def __init__(self, inner: RangeObserver, inv_smooth: np.ndarray) -> None:
        self.inner, self.inv_smooth = inner, inv_smooth

    def update(self, x: np.ndarray) -> None:
        self.inner.update(x * self.inv_smooth)

    def range(self) -> tuple[float, float]:
        return self.inner.range()


class TeeObserver:
    """Several observers watching the same tensor."""

    def __init__(self, *observers: Watcher) -> None:
        self.observers = observers

    def update(self, x: np.ndarray) -> None:
        for o in self.observers:
            o.update(x)


def make_observer(method: str) -> MinMaxObserver:
    """``"minmax" | "percentile" | "mse"`` → a fresh observer."""
    if method == "minmax":
        return MinMaxObserver()
    if method == "percentile":
        return PercentileObserver()
    if method == "mse":
        return MSEObserver()
    raise ValueError(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")
