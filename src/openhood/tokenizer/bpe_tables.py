"""The byte-level BPE tokenizer's tables and compiled kernels, as ``bpe.py`` calls them, numba not imported.

``MergeTable`` ((left id, right id) → (rank, merged id), open addressing) and ``PieceCache``
(merged ids of pieces already seen) are flat NumPy arrays the kernel reads and writes. The
kernels' source is numba code in ``tokenizer/bpe_kernel.py``; they run from a library compiled
ahead of time (``openhood.aot``: once per machine and kernel source, then loaded in about a
millisecond), or through numba's JIT where that library cannot be built.

The trade-off: the kernel's signature is written out here, once, with the tables' arrays as
separate arguments (an entry point checks each array's dtype; it cannot check inside a tuple).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openhood.aot import Export, KernelSet

EMPTY = -1

_SOURCE = "openhood.tokenizer.bpe_kernel"
_TABLE = ("i8[::1]", "i4[::1]", "i4[::1]", "i8", "i8")  # keys, ranks, merged, vocab size, mask
# slots, hashes, key_start, key_len, value_start, value_len, key_bytes, values, used
_CACHE = ("i4[::1]", "i8[::1]", "i8[::1]", "i4[::1]", "i8[::1]", "i4[::1]", "u1[::1]", "i4[::1]", "i8[::1]")

BPE = KernelSet(
    "bpe",
    (
        # (keys, ranks, merged, (n, 3) int64 merges, vocab size, mask)
        Export("fill_merges", f"{_SOURCE}:fill_merges", ("i8[::1]", "i4[::1]", "i4[::1]", "i8[:, ::1]", "i8", "i8")),
        # (code points, starts, ends, special starts, ends, ids, classes, split digits, byte ids,
        #  *table, *cache) → (ids, ids per text)
        Export(
            "encode_texts",
            f"{_SOURCE}:encode_texts",
            (
                "u4[::1]",
                "i8[::1]",
                "i8[::1]",
                "i8[::1]",
                "i8[::1]",
                "i4[::1]",
                "u1[::1]",
                "b1",
                "i4[::1]",
                *_TABLE,
                *_CACHE,
            ),
            "Tuple((i4[::1], i8[::1]))",
        ),
    ),
    sources=(Path(__file__).with_name("bpe_kernel.py"), Path(__file__)),
)

fill_merges = BPE.kernel("fill_merges")
encode_texts = BPE.kernel("encode_texts")


class MergeTable:
    """(left id, right id) → (rank, merged id) as flat arrays the compiled kernel probes."""

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
        fill_merges(self.keys, self.ranks, self.merged, arr, vocab_size, self.mask)


class PieceCache:
    """Merged ids of pieces already seen, keyed by their UTF-8 bytes, in flat arrays the compiled kernel uses.

    An open-addressing table of entry numbers; entry k's key bytes are ``key_bytes[key_start[k]:
    key_start[k] + key_len[k]]`` and its ids ``values[value_start[k]:...]``. Bounded: when an
    entry or its bytes do not fit, the kernel empties the whole cache and starts over.
    """

    def __init__(self, limit: int, bytes_per_entry: int = 16, ids_per_entry: int = 8):
        size = 1
        while size < 2 * max(limit, 1):
            size *= 2
        self.limit = limit
        self.slots = np.full(size, EMPTY, dtype=np.int32)
        self.hashes = np.zeros(limit, dtype=np.int64)
        self.key_start = np.zeros(limit, dtype=np.int64)
        self.key_len = np.zeros(limit, dtype=np.int32)
        self.value_start = np.zeros(limit, dtype=np.int64)
        self.value_len = np.zeros(limit, dtype=np.int32)
        self.key_bytes = np.zeros(bytes_per_entry * limit, dtype=np.uint8)
        self.values = np.zeros(ids_per_entry * limit, dtype=np.int32)
        self.used = np.zeros(3, dtype=np.int64)  # entries, key bytes, value ids

    def __len__(self) -> int:
        return int(self.used[0])

    def clear(self) -> None:
        self.slots.fill(EMPTY)
        self.used[:] = 0

    def arrays(self) -> tuple:
        return (
            self.slots,
            self.hashes,
            self.key_start,
            self.key_len,
            self.value_start,
            self.value_len,
            self.key_bytes,
            self.values,
            self.used,
        )
