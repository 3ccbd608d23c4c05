"""Padding-free execution of a padded text batch: only the real tokens go through the row ops.

A batch of B texts padded to T tokens is B*T rows, and every row costs the same in each GEMM,
LayerNorm and GELU whether it holds a token or padding. Every op of a BERT encoder except
attention (and the embedding lookup's position ids) works row by row, so the real tokens can be
gathered into N = sum(lengths) rows once at the start, run through the whole stack as an
(N, C) array, and scattered back into (B*T, C) at the end (padding rows zero: every consumer
masks them out). Attention is the one op that needs the (B, T) shape: it scatters its N rows of
Q, K and V into a (B, T, ·) scratch, runs the padded kernel with the mask bias as before and
gathers its N output rows back. Attention's share of a layer's arithmetic is 4·T²·C against
24·T·C² for the projections and FFN, T/(6C): 3% at T = 64 for MiniLM's C = 384, so running it
padded costs little of what packing saves.

Semantics are those of the padded graph, for any 0/1 mask: a token keeps its column index as
its position id (BERT's position ids are ``arange(T)`` whatever the mask), and attention still
sees every key the mask allows. The trade-off: two copies of the activations per layer
(Q/K/V in, context out: ~4·N·C floats) against (B*T − N)·12·C² multiply-adds of padding per
layer, so batches with almost no padding (length-sorted, batch 1) are left as they are
(``MIN_PADDING``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Pack only when at least this share of a batch's B*T rows is padding. Per padded row and layer
# packing saves 12·C² multiply-adds (MiniLM: 1.8 M); per real row and layer it copies ~4·C
# floats (Q/K/V out to the padded copy, the context back) besides the per-batch index work.
# By that count it pays at well under 1% of padding; 3% is a margin for the fixed costs, not a
# measured optimum (benchmarks/batching.py --packing measures 40% padding: 1.43x).
MIN_PADDING = 0.03
# False: always run the padded rows (the reference behaviour; tests compare the two).
PACK_TOKENS = True


@dataclass(frozen=True)
class TokenPacking:
    """Where the N real tokens of a (B, T) batch sit.

    rows: (N,) int64 flat indices into the B*T padded rows, ascending (so each text's tokens are
    contiguous and in order); positions: (N,) their column (position id); starts: (B+1,) offsets
    of each text's first packed row (text b is rows starts[b]:starts[b+1]).
    """

    batch: int
    seq: int
    rows: np.ndarray
    positions: np.ndarray
    starts: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.rows.shape[0])

    @property
    def padding(self) -> float:
        """Share of the B*T rows that are padding."""
        return 1.0 - self.tokens / max(1, self.batch * self.seq)

    @classmethod
    def from_mask(cls, attention_mask: np.ndarray, min_padding: float = MIN_PADDING) -> TokenPacking | None:
        """The packing of a (B, T) 0/1 mask, or None when packing would not pay (padding below
        ``min_padding``, packing switched off) or a text has no token (an all-zero row: the
        padded path handles it as it always has)."""
        if not PACK_TOKENS:
            return None
        mask = np.asarray(attention_mask)
        if mask.ndim != 2:
            return None
        b, t = mask.shape
        real = mask > 0  # (B, T)
        counts = np.count_nonzero(real, axis=1)  # (B,) tokens per text
        if not counts.all():
            return None
        rows = np.flatnonzero(real)
        starts = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        packing = cls(b, t, rows, rows % t, starts)
        return packing if packing.padding >= min_padding else None

    def pack(self, padded_rows: np.ndarray) -> np.ndarray:
        """(B*T, ...) → (N, ...): the real tokens' rows."""
        packed: np.ndarray = padded_rows[self.rows]
        return packed

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """(N, C) → (B*T, C) with the padding rows zero."""
        full = np.zeros((self.batch * self.seq, packed.shape[1]), dtype=packed.dtype)
        full[self.rows] = packed
        return full

    def mean(self, packed: np.ndarray) -> np.ndarray:
        """(N, C) → (B, C): each text's mean over its tokens (what ``ops.mean_pool`` gives on the
        padded rows with the mask)."""
        sums = np.add.reduceat(packed, self.starts[:-1], axis=0)  # (B, C); every text has ≥ 1 row
        sums /= np.diff(self.starts).astype(np.float32)[:, None]
        return sums


def pack_naive(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Reference: the rows of (B, T, C) ``hidden`` whose mask is set, text by text (B*T order)."""
    b, t, c = hidden.shape
    return np.asarray([hidden[i, j] for i in range(b) for j in range(t) if attention_mask[i, j]]).reshape(-1, c)
