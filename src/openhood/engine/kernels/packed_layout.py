"""The packed layout of a GGUF quantized matrix (``PackedMatrix``): what ``packed_matmul``'s kernels read.

Rows are grouped in chunks of ``CH`` and stored chunk-transposed (the chunk's rows innermost), so a
kernel's inner loop loads ``CH`` consecutive scales, minima and nibbles as vectors. Kept apart from
the kernels so that a model holding such matrices (the decoder) can be built and its embedding rows
read without importing numba: only a process that multiplies by them (quantized weights) pays for
the kernels' import and load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from openhood.engine.kernels.gguf_matmul import QuantMatrix

CH = 64  # rows per chunk: 8 AVX2 / 4 AVX-512 vectors per inner loop, and a unit of parallel work


@dataclass(frozen=True)
class PackedMatrix:
    """A (rows, cols) weight, rows padded to a multiple of ``CH`` and stored chunk-transposed."""

    kind: str
    shape: tuple[int, int]
    d: np.ndarray  # (n_chunks, n_blocks, CH) uint16: float16 bit patterns
    m: np.ndarray | None  # (n_chunks, n_blocks, CH) uint16 float16 bits, Q4_1 only
    q: np.ndarray  # Q4_1: (n_chunks, n_blocks, 16, CH) uint8 nibble pairs; Q8_0: (n_chunks, n_blocks, 32, CH) int8

    @property
    def nbytes(self) -> int:
        return self.d.nbytes + self.q.nbytes + (self.m.nbytes if self.m is not None else 0)

    @classmethod
    def from_quant(cls, w: QuantMatrix) -> PackedMatrix:
        rows, _cols = w.shape
        nc = -(-rows // CH)
        pad = nc * CH - rows  # zero rows (d = m = 0) so every chunk is full; their outputs are never written

        def chunked(a: np.ndarray) -> np.ndarray:  # (rows, nb, ...) -> (nc, nb, ..., CH)
            a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)]) if pad else a
            a = a.reshape(nc, CH, *a.shape[1:])
            return np.ascontiguousarray(np.moveaxis(a, 1, -1))

        return cls(
            w.kind,
            w.shape,
            chunked(w.d.view(np.uint16)),
            None if w.m is None else chunked(w.m.view(np.uint16)),
            chunked(w.q),
        )

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Dequantized rows ``idx`` (n, cols) float32: the embedding lookup."""
        c, r = idx // CH, idx % CH
        d = self.d[c, :, r].view(np.float16).astype(np.float32)[..., None]  # (n, nb, 1)
        qs = self.q[c, :, :, r]  # (n, nb, 16 or 32)
        if self.m is None:  # Q8_0
            return np.asarray((qs.astype(np.float32) * d).reshape(len(idx), -1))
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
        m = self.m[c, :, r].view(np.float16).astype(np.float32)[..., None]
        return np.asarray((q * d + m).reshape(len(idx), -1))


@dataclass(frozen=True)
class PackedStack:
    """Same-shaped Q4_1 matrices, one per layer, each field in one array with the layer first:
    what a compiled decode step that loops over the layers reads (one array per role instead of
    a list of arrays, which numba would unbox at every call). The layers' own ``PackedMatrix``
    become views into it (``matrix``), so the stack costs no memory beyond a transient copy at load."""

    shape: tuple[int, int]
    d: np.ndarray  # (L, n_chunks, n_blocks, CH) uint16
    m: np.ndarray  # (L, n_chunks, n_blocks, CH) uint16
    q: np.ndarray  # (L, n_chunks, n_blocks, 16, CH) uint8

    @property
    def nbytes(self) -> int:
        return self.d.nbytes + self.m.nbytes + self.q.nbytes

    @classmethod
    def of(cls, mats: list[object]) -> PackedStack | None:
        """The stack of ``mats``, or None unless every one is a Q4_1 ``PackedMatrix`` of one shape."""
        packed = [w for w in mats if isinstance(w, PackedMatrix) and w.kind == "Q4_1" and w.m is not None]
        if not packed or len(packed) < len(mats) or len({w.shape for w in packed}) != 1:
            return None
        return cls(
            packed[0].shape,
            np.stack([w.d for w in packed]),
            np.stack([w.m for w in packed if w.m is not None]),  # every one: filtered above
            np.stack([w.q for w in packed]),
        )

    def matrix(self, i: int) -> PackedMatrix:
        """Layer ``i``'s matrix as views into the stack."""
        return PackedMatrix("Q4_1", self.shape, self.d[i], self.m[i], self.q[i])
