"""Reuse activation buffers across the nodes and the calls of one executor.

A CNN pass allocates an output per conv or block, up to 51 MB at batch 32 (the stem's
(32, 112, 112, 32) float32; 154 MB for block 1's expand output when the blocks are not fused). NumPy asks the OS for such arrays afresh (mmap, huge pages), so
every call paid the kernel to fault in and zero them, and to unmap them when freed: measured
at batch 32, 534 ms of system time beside 837 ms of user time per forward pass. ``BufferPool``
hands out float32 arrays carved from buffers it keeps: a value the executor frees after its
last reader goes back to the pool, and the next node (or the next call, which repeats the same
pattern) takes it again, already mapped and warm in cache.

Trade-off: the pool keeps the largest set of simultaneously live activations (the pass's peak,
~80 MB at batch 32 with the fused blocks: the stem's output and block 0's) after a call returns, instead of giving it back; a served model pays that
memory once. Only arrays the pool handed out are ever taken back; arrays that leave the graph
(its outputs) are forgotten at the end of the call and belong to the caller.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np


class BufferPool:
    """``take(shape)`` → a C-contiguous float32 array (contents undefined); ``release(arr)``
    returns one that ``take`` gave out; ``forget_lent()`` drops the record of those never returned."""

    def __init__(self) -> None:
        self._free: list[tuple[int, int, np.ndarray]] = []  # (size, tie-break, flat buffer), by size
        self._lent: dict[int, np.ndarray] = {}  # id(view handed out) → its flat buffer
        self._counter = 0
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        size = 1
        for s in shape:
            size *= s
        with self._lock:
            # Best fit: the smallest free buffer that holds ``size`` floats (buffers come back
            # in the same order every call, so after the first call this is an exact fit).
            i = bisect.bisect_left(self._free, (size, -1))
            if i < len(self._free):
                flat = self._free.pop(i)[2]
            else:
                flat = np.empty(size, dtype=np.float32)
            view = flat[:size].reshape(shape)
            self._lent[id(view)] = flat
        return view

    def release(self, arr: object) -> None:
        """Give back an array from ``take`` (anything else is ignored: feeds, other ops' arrays)."""
        if not isinstance(arr, np.ndarray):
            return
        with self._lock:
            flat = self._lent.get(id(arr))
            # The id alone could be a dead view's, reused by another object: the memory must match.
            if flat is not None and flat.ctypes.data == arr.ctypes.data:
                del self._lent[id(arr)]
                self._counter += 1
                bisect.insort(self._free, (flat.size, self._counter, flat))

    def forget_lent(self) -> None:
        """End of a call: arrays still out (the graph's outputs) now belong to the caller."""
        with self._lock:
            self._lent.clear()

    @property
    def nbytes(self) -> int:
        """Bytes held for reuse (free buffers only)."""
        return sum(f.nbytes for _, _, f in self._free)
