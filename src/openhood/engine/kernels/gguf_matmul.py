"""GGUF Q4_1 / Q8_0 weights as blocks in memory, and the naive reference every quantized matmul must equal.

``QuantMatrix`` holds a matrix's blocks row by row as the file has them, float16 scale (and
Q4_1 min) included: the form the loader fuses (QKV, gate+up) and
permutes (Q/K rows) before ``engine.kernels.packed_matmul`` repacks it for its SIMD kernels.
``quant_linear_naive`` is the reference: dequantize the whole matrix, one float64 product.
The trade-off: the row-major form is easy to check against the file (the tests compare
``rows`` with ``formats.gguf.dequantize`` bit for bit) but slow to multiply, so no kernel reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from openhood.formats.gguf import QK, GGUFTensor, dequantize


@dataclass(frozen=True)
class QuantMatrix:
    """A (rows, cols) weight in blocks of 32 along cols: ``w = d * q + m`` (``m`` is None for Q8_0)."""

    kind: str
    shape: tuple[int, int]
    d: np.ndarray  # (rows, n_blocks) float16, as the file stores it
    m: np.ndarray | None  # (rows, n_blocks) float16, Q4_1 only
    q: np.ndarray  # Q4_1: (rows, n_blocks, 16) uint8 nibble pairs; Q8_0: (rows, n_blocks, 32) int8

    @property
    def nbytes(self) -> int:
        return self.d.nbytes + self.q.nbytes + (self.m.nbytes if self.m is not None else 0)

    @classmethod
    def from_tensor(cls, t: GGUFTensor) -> QuantMatrix:
        rows, cols = t.shape
        nb = cols // QK
        if t.kind == "Q4_1":
            b = np.asarray(t.raw).reshape(rows, nb, 20)
            d = b[..., 0:2].copy().view(np.float16)[..., 0]
            m = b[..., 2:4].copy().view(np.float16)[..., 0]
            return cls("Q4_1", (rows, cols), d, m, np.ascontiguousarray(b[..., 4:]))
        if t.kind == "Q8_0":
            b = np.asarray(t.raw).reshape(rows, nb, 34)
            d = b[..., 0:2].copy().view(np.float16)[..., 0]
            return cls("Q8_0", (rows, cols), d, None, np.ascontiguousarray(b[..., 2:]).view(np.int8))
        raise ValueError(f"tensor {t.name}: no quantized kernel for {t.kind}")

    @classmethod
    def stack(cls, parts: list[QuantMatrix]) -> QuantMatrix:
        """Rows of several matrices of one kind, one after another (fused QKV, gate+up)."""
        kind = parts[0].kind
        m = np.concatenate([p.m for p in parts]) if kind == "Q4_1" else None
        return cls(
            kind,
            (sum(p.shape[0] for p in parts), parts[0].shape[1]),
            np.concatenate([p.d for p in parts]),
            m,
            np.concatenate([p.q for p in parts]),
        )

    def permute_rows(self, order: np.ndarray) -> QuantMatrix:
        return QuantMatrix(
            self.kind, self.shape, self.d[order], None if self.m is None else self.m[order], self.q[order]
        )

    def dequantize(self) -> np.ndarray:
        """The whole matrix (rows, cols) float32."""
        return self.rows(np.arange(self.shape[0]))

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Dequantized rows ``idx`` (n, cols) float32: the embedding lookup."""
        d = self.d[idx].astype(np.float32)[..., None]
        if self.kind == "Q8_0":
            return np.asarray((self.q[idx].astype(np.float32) * d).reshape(len(idx), -1))
        qs = self.q[idx]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
        assert self.m is not None  # Q4_1 always has mins
        return np.asarray((q * d + self.m[idx].astype(np.float32)[..., None]).reshape(len(idx), -1))


def quant_linear_naive(x: np.ndarray, t: GGUFTensor) -> np.ndarray:
    """Reference: dequantize the whole matrix, then one float64 product."""
    return (x.astype(np.float64) @ dequantize(t).astype(np.float64).T).astype(np.float32)
