"""The BPE merge loop in numba, for a whole batch of pre-token pieces at once.

Pieces arrive as one flat array of byte-token ids with offsets; each piece is merged in place,
lowest-rank pair first, every occurrence of that pair left to right (what HF and llama.cpp
produce). Merge lookups use an open-addressing hash table in two NumPy arrays
(key ``left * V + right`` → rank, merged id), so the kernel touches no Python objects.
The trade-off: building the table costs ~20 ms at load; the loop is O(n²) per piece, cheap for
the short pieces a pre-tokenizer makes (a pathological 10k-character piece is still fine).
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1


@njit(inline="always")
def _slot(key, mask):
    return (key * 0x9E3779B1) & mask


@njit(cache=True)
def _insert(keys, ranks, merged, key, rank, new, mask):
    s = _slot(key, mask)
    while keys[s] != EMPTY:
        if keys[s] == key:
            return  # the first (lowest-rank) entry for a pair wins
        s = (s + 1) & mask
    keys[s], ranks[s], merged[s] = key, rank, new


@njit(cache=True)
def _lookup(keys, ranks, key, mask):
    s = _slot(key, mask)
    while keys[s] != EMPTY:
        if keys[s] == key:
            return s
        s = (s + 1) & mask
    return -1


class MergeTable:
    """(left id, right id) → (rank, merged id) as flat arrays numba can probe."""

    def __init__(self, pairs: list[tuple[int, int, int]], vocab_size: int):
        size = 1
        while size < 2 * max(len(pairs), 1):
            size *= 2
        self.mask = size - 1
        self.vocab_size = vocab_size
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.ranks = np.zeros(size, dtype=np.int32)
        self.merged = np.zeros(size, dtype=np.int32)
        arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 3)
        _fill(self.keys, self.ranks, self.merged, arr, vocab_size, self.mask)


@njit(cache=True)
def _fill(keys, ranks, merged, arr, vocab_size, mask):
    for rank in range(arr.shape[0]):
        _insert(keys, ranks, merged, arr[rank, 0] * vocab_size + arr[rank, 1], rank, arr[rank, 2], mask)


@njit(cache=True, nogil=True)
def merge_pieces(ids, offsets, lengths_out, keys, ranks, merged, vocab_size, mask):
    """Merge each piece ``ids[offsets[p]:offsets[p+1]]`` in place; its final length goes to lengths_out[p]."""
    for p in range(offsets.size - 1):
        a = offsets[p]
        n = offsets[p + 1] - a
        while n > 1:
            best_rank, best_slot = 2**31 - 1, -1
            for k in range(n - 1):
                s = _lookup(keys, ranks, ids[a + k] * vocab_size + ids[a + k + 1], mask)
                if s >= 0 and ranks[s] < best_rank:
                    best_rank, best_slot = ranks[s], s
            if best_slot < 0:
                break
            left, right = keys[best_slot] // vocab_size, keys[best_slot] % vocab_size
            new = merged[best_slot]
            w, k = 0, 0
            while k < n:
                if k < n - 1 and ids[a + k] == left and ids[a + k + 1] == right:
                    ids[a + w] = new
                    k += 2
                else:
                    ids[a + w] = ids[a + k]
                    k += 1
                w += 1
            n = w
        lengths_out[p] = n
