"""A preallocated key/value cache with one slot per running sequence.

Attention at decode step t needs the keys and values of all t earlier tokens; recomputing
them costs a full forward over the prefix per new token (O(t²) in total), caching them costs
memory: ``2 * layers * kv_heads * head_dim * 4`` bytes per token (46 KiB for SmolLM2-135M).
The cache is one array per K and V, ``(layers, slots, kv_heads, max_len, head_dim)``, allocated
once: a slot is a sequence's private region and ``lengths[slot]`` how many positions it holds.
The trade-off: memory is reserved for ``slots * max_len`` tokens up front (pages are touched
only as they fill, so RSS grows with use), in exchange for no allocation, no fragmentation and
plain slicing on the hot path; a scheduler admits a sequence only when a slot is free.
The arrays live in an anonymous mapping advised against transparent huge pages (``lazy_zeros``):
with numpy's own allocation, which asks for huge pages, the first write to each slot's region of
each layer faulted in a whole 2 MiB page: the generation server's RSS at 16 streams was 2,127 MiB,
796 MiB with this mapping (benchmarks/generation_serving.py).
"""

from __future__ import annotations

import mmap

import numpy as np


class KVCacheFullError(RuntimeError):
    """A sequence would grow beyond its slot's ``max_len`` positions."""


def lazy_zeros(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """Zeros in a private anonymous mapping whose pages fault in one small page at a time as they
    are written (no RSS until then). numpy advises transparent huge pages (``MADV_HUGEPAGE``) for
    large arrays; for a cache written a few positions at a time in many separate regions that made
    every first write cost 2 MiB (``tests/engine/test_kv_cache.py`` bounds the growth by what is
    written)."""
    count = int(np.prod(shape))
    nbytes = max(1, count * np.dtype(dtype).itemsize)
    private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    buf = mmap.mmap(-1, nbytes, flags=private) if private else mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; elsewhere there are no transparent huge pages to refuse
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)  # the array keeps the mapping alive


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, n_slots: int, max_len: int):
        shape = (n_layers, n_slots, n_kv_heads, max_len, head_dim)
        self.k = lazy_zeros(shape)  # pages mapped as positions are written: RSS grows with use
        self.v = lazy_zeros(shape)
        self.lengths = np.zeros(n_slots, dtype=np.int64)  # (slots,) positions filled per slot
        self.n_slots, self.max_len = n_slots, max_len

    @property
    def bytes_per_token(self) -> int:
        n_layers, _, n_kv_heads, _, head_dim = self.k.shape
        return int(2 * n_layers * n_kv_heads * head_dim * self.k.itemsize)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def reset(self, slot: int) -> None:
        """Free a slot for the next sequence (its stale contents are masked out, never read)."""
        self.lengths[slot] = 0

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Positions 0..n-1 of ``src`` into ``dst`` (prefix caching: a shared prompt computed once)."""
        self.k[:, dst, :, :n] = self.k[:, src, :, :n]
        self.v[:, dst, :, :n] = self.v[:, src, :, :n]

    def check_room(self, slots: np.ndarray, n_new: np.ndarray) -> None:
        over = self.lengths[slots] + n_new > self.max_len
        if over.any():
            s = int(slots[np.argmax(over)])
            raise KVCacheFullError(f"slot {s}: {int(self.lengths[s])} + new tokens exceed max_len {self.max_len}")

    def write(self, layer: int, slot: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v of shape (n, kv_heads, head_dim) at positions start..start+n-1 of ``slot``."""
        n = k.shape[0]
        self.k[layer, slot, :, start : start + n] = k.transpose(1, 0, 2)
        self.v[layer, slot, :, start : start + n] = v.transpose(1, 0, 2)

    def view(self, layer: int, slots: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V of ``slots`` up to ``length`` positions: (B, kv_heads, length, head_dim).

        A view when the slots are consecutive (what a scheduler should aim for), a gather otherwise.
        """
        s0 = int(slots[0])
        if np.array_equal(slots, np.arange(s0, s0 + len(slots))):
            sl = slice(s0, s0 + len(slots))
            return self.k[layer, sl, :, :length], self.v[layer, sl, :, :length]
        return self.k[layer, slots, :, :length], self.v[layer, slots, :, :length]
