"""Length buckets: which padded length a sequence is batched at.

Online serving pads each request to the smallest bucket that fits it, so a 300-token document
never drags twenty 20-token queries up to its length. The trade-off is density: more buckets
mean less padding but fewer requests per bucket to batch together (and, for static-graph
engines, more shapes to compile). ``LengthBuckets.from_lengths`` derives boundaries from an
observed length distribution: one at P50, one at P80 (so ~80% of traffic lands in the first
two buckets), one at P95, and the model's maximum — rounded up to a multiple of 16 (GEMM-friendly)
and thinned so that consecutive boundaries are at least 1.5x apart (never too dense).

>>> b = LengthBuckets((32, 64, 128, 256))
>>> b.index(1), b.index(33), b.index(256)
(0, 1, 3)
>>> b.upper(1)
64
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

# Quantiles whose (rounded-up) values become boundaries; the model's max length closes the list.
DEFAULT_QUANTILES = (0.50, 0.80, 0.95)
ROUND_TO = 16
MIN_RATIO = 1.5  # consecutive boundaries closer than this are merged: "not too dense"

# The fixed, bounded label set for latency-by-length metrics. It is independent of the
# batching buckets so dashboards stay comparable when batching is retuned.
LENGTH_LABEL_EDGES = (32, 64, 128, 256)


class LengthBuckets:
    """Sorted, inclusive upper bounds of the padded lengths a batch may have."""

    def __init__(self, bounds: Sequence[int]):
        bounds = sorted({int(b) for b in bounds})
        if not bounds or bounds[0] < 1:
            raise ValueError(f"buckets must be positive token counts, got {list(bounds)}")
        self.bounds: tuple[int, ...] = tuple(bounds)

    @classmethod
    def for_model(cls, bounds: Sequence[int], max_length: int) -> LengthBuckets:
        """Clip ``bounds`` to the model's ``max_length`` and make sure the last bucket is it."""
        kept = [b for b in bounds if 0 < b < max_length]
        return cls([*kept, max_length])

    @classmethod
    def from_lengths(
        cls,
        lengths: Sequence[int] | np.ndarray,
        max_length: int,
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
    ) -> LengthBuckets:
        """Derive buckets from observed token lengths (special tokens included).

        >>> LengthBuckets.from_lengths([10] * 50 + [70] * 30 + [150] * 15 + [300] * 5, 256).bounds
        (48, 96, 160, 256)
        """
        arr = np.minimum(np.asarray(lengths, dtype=np.int64), max_length)
        if arr.size == 0:
            raise ValueError("from_lengths needs at least one observed length")
        bounds: list[int] = []
        for q in quantiles:
            value = int(np.ceil(np.quantile(arr, q) / ROUND_TO) * ROUND_TO)
            value = min(max(value, ROUND_TO), max_length)
            if not bounds or value >= bounds[-1] * MIN_RATIO:
                bounds.append(value)
        if bounds[-1] != max_length:
            if max_length < bounds[-1] * MIN_RATIO and len(bounds) > 1:
                bounds[-1] = max_length  # merge a too-close last boundary into the maximum
            else:
                bounds.append(max_length)
        return cls(bounds)

    def index(self, length: int) -> int:
        """Index of the smallest bucket holding ``length`` tokens (lengths are pre-truncated)."""
        i = bisect.bisect_left(self.bounds, length)
        if i == len(self.bounds):
            raise ValueError(f"length {length} exceeds the largest bucket {self.bounds[-1]}")
        return i

    def upper(self, index: int) -> int:
        return self.bounds[index]

    def share_per_bucket(self, lengths: Sequence[int] | np.ndarray) -> list[float]:
        """Fraction of ``lengths`` landing in each bucket (for the docs and `openhood buckets`)."""
        arr = np.minimum(np.asarray(lengths, dtype=np.int64), self.bounds[-1])
        idx = np.searchsorted(np.asarray(self.bounds), arr, side="left")
        counts = np.bincount(idx, minlength=len(self.bounds))
        shares: list[float] = (counts / max(arr.size, 1)).tolist()
        return shares

    def __len__(self) -> int:
        return len(self.bounds)

    def __repr__(self) -> str:
        return f"LengthBuckets({list(self.bounds)})"

    def __str__(self) -> str:
        return ",".join(str(b) for b in self.bounds)


def length_label(length: int) -> str:
    """The bounded metric label for a token length: ``0-32``, ``33-64``, ``65-128``, ``129-256``, ``257+``.

    >>> length_label(32), length_label(33), length_label(1000)
    ('0-32', '33-64', '257+')
    """
    low = 0
    for edge in LENGTH_LABEL_EDGES:
        if length <= edge:
            return f"{low}-{edge}"
        low = edge + 1
    return f"{LENGTH_LABEL_EDGES[-1] + 1}+"


LENGTH_LABELS = (*tuple(length_label(e) for e in LENGTH_LABEL_EDGES), length_label(LENGTH_LABEL_EDGES[-1] + 1))
