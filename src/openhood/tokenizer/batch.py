"""Encoded batches: ragged (flat ids + offsets, what the tokenizer produces) and padded (what a model eats).

Ragged is the natural output (no wasted pad tokens, one allocation) and what a scheduler wants
to bucket by length; padding is a separate, vectorized step so each caller picks its own shape:
to the longest row, or to a fixed length / bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PaddedBatch:
    input_ids: np.ndarray  # (B, T) int64
    attention_mask: np.ndarray  # (B, T) int64, 1 = real token
    token_type_ids: np.ndarray  # (B, T) int64

    @property
    def shape(self) -> tuple[int, int]:
        return self.input_ids.shape


class RaggedBatch:
    """``ids[offsets[i]:offsets[i+1]]`` are the ids of text i (special tokens included)."""

    __slots__ = ("ids", "lengths", "offsets", "pad_id", "pad_left", "pad_type_id", "truncated")

    def __init__(
        self,
        ids: np.ndarray,
        lengths: np.ndarray,
        truncated: np.ndarray,
        *,
        pad_id: int = 0,
        pad_type_id: int = 0,
        pad_left: bool = False,
    ):
        self.ids = ids  # (N,) int32, all texts back to back
        self.lengths = lengths  # (n,) int64
        self.offsets = np.zeros(lengths.size + 1, dtype=np.int64)  # (n + 1,)
        np.cumsum(lengths, out=self.offsets[1:])
        self.truncated = truncated  # (n,) bool
        self.pad_id = pad_id
        self.pad_type_id = pad_type_id
        self.pad_left = pad_left

    def __len__(self) -> int:
        return self.lengths.size

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"batch index {i} out of range for {n} texts")
        i %= n
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self):
        ids, off = self.ids, self.offsets
        return (ids[off[i] : off[i + 1]] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"RaggedBatch(n={len(self)}, tokens={self.ids.size}, truncated={int(self.truncated.sum())})"

    def take(self, idx) -> RaggedBatch:
        """Rows ``idx`` (in that order) as a new batch: ids gathered, nothing re-tokenized."""
        idx = np.asarray(idx, dtype=np.int64)
        ids = np.concatenate([self[int(i)] for i in idx]) if idx.size else self.ids[:0]
        return RaggedBatch(
            ids,
            self.lengths[idx],
            self.truncated[idx],
            pad_id=self.pad_id,
            pad_type_id=self.pad_type_id,
            pad_left=self.pad_left,
        )

    def pad(self, length: int | None = None) -> PaddedBatch:
        """Pad to the longest row (``None``) or to ``length`` (a fixed size or a bucket).

        >>> RaggedBatch(np.array([101, 7, 102, 101, 102], np.int32), np.array([3, 2]), np.zeros(2, bool)).pad().input_ids.tolist()
        [[101, 7, 102], [101, 102, 0]]
        """
        longest = int(self.lengths.max()) if len(self) else 0
        if length is None:
            length = longest
        elif length < longest:
            raise ValueError(
                f"cannot pad to length {length}: the longest text has {longest} tokens "
                "(encode with max_length to truncate first)"
            )
        cols = np.arange(length, dtype=np.int64)  # (T,)
        if self.pad_left:
            mask = cols[None, :] >= (length - self.lengths)[:, None]  # (B, T)
        else:
            mask = cols[None, :] < self.lengths[:, None]  # (B, T)
        input_ids = np.full(mask.shape, self.pad_id, dtype=np.int64)
        input_ids[mask] = self.ids  # row-major order matches the flat layout
        token_type_ids = np.zeros(mask.shape, dtype=np.int64)
        if self.pad_type_id:
            token_type_ids[~mask] = self.pad_type_id
        return PaddedBatch(input_ids, mask.astype(np.int64), token_type_ids)
