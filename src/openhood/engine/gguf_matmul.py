"""Matrix products straight from GGUF Q4_1 / Q8_0 blocks, without a float32 copy of the weights.

A decode step at batch 1 reads every weight once, so the bytes per weight set its speed: 4 in
float32, ~1.06 in Q8_0, 0.75 as we store Q4_1 (nibbles + float32 scale and min per block of
32). The kernels (numba, parallel over output rows) unpack one block into 32 floats and use
it for every input row, so the unpacking is paid once per block per call whatever the batch.
Per block: ``y += d * (q · x_blk) + m * sum(x_blk)`` (Q4_1) or ``y += d * (q · x_blk)`` (Q8_0),
which is the dequantized product regrouped — equal to ``x @ dequantize(W).T`` up to float32
summation order (the tests bound it). The trade-off: our loops reach a fraction of BLAS's
flops, so this wins when memory is the bottleneck (batch 1) and loses to float32 sgemm when
many rows share each weight (large batches and prefill); ``Llama`` picks per load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from openhood.formats.gguf import QK, GGUFTensor, dequantize

ROWS_PER_TASK = 32


@dataclass(frozen=True)
class QuantMatrix:
    """A (rows, cols) weight in blocks of 32 along cols: ``w = d * q + m`` (``m`` is None for Q8_0)."""

    kind: str
    shape: tuple[int, int]
    d: np.ndarray  # (rows, n_blocks) float32
    m: np.ndarray | None  # (rows, n_blocks) float32, Q4_1 only
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
            d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
            m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
            return cls("Q4_1", (rows, cols), d, m, np.ascontiguousarray(b[..., 4:]))
        if t.kind == "Q8_0":
            b = np.asarray(t.raw).reshape(rows, nb, 34)
            d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
            return cls("Q8_0", (rows, cols), d, None, np.ascontiguousarray(b[..., 2:]).view(np.int8))
        raise ValueError(f"tensor {t.name}: no quantized kernel for {t.kind}")

    @classmethod
    def stack(cls, parts: list[QuantMatrix]) -> QuantMatrix:
        """Rows of several matrices of one kind, one after another (fused QKV, gate+up)."""
        kind = parts[0].kind
        m = np.concatenate([p.m for p in parts]) if kind == "Q4_1" else None
        return cls(kind, (sum(p.shape[0] for p in parts), parts[0].shape[1]),
                   np.concatenate([p.d for p in parts]), m, np.concatenate([p.q for p in parts]))

    def permute_rows(self, order: np.ndarray) -> QuantMatrix:
        return QuantMatrix(self.kind, self.shape, self.d[order], None if self.m is None else self.m[order], self.q[order])

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Dequantized rows ``idx`` (n, cols) float32: the embedding lookup."""
        d = self.d[idx][..., None]
        if self.kind == "Q8_0":
            return np.asarray((self.q[idx].astype(np.float32) * d).reshape(len(idx), -1))
        qs = self.q[idx]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
        assert self.m is not None  # Q4_1 always has mins
        return np.asarray((q * d + self.m[idx][..., None]).reshape(len(idx), -1))


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _q4_1_matmul(x: np.ndarray, d: np.ndarray, m: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:  # x (M, K), out (M, N)
    M, _K = x.shape
    N, nb = d.shape
    xsum = np.empty((M, nb), np.float32)  # per-block sums of x, for the min term
    for i in range(M):
        for b in range(nb):
            s = np.float32(0.0)
            for j in range(QK):
                s += x[i, b * QK + j]
            xsum[i, b] = s
    n_tasks = (N + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        w = np.empty(QK, np.float32)
        acc = np.empty(M, np.float32)
        for r in range(task * ROWS_PER_TASK, min(N, (task + 1) * ROWS_PER_TASK)):
            acc[:] = 0.0
            for b in range(nb):
                for j in range(QK // 2):
                    byte = q[r, b, j]
                    w[j] = np.float32(byte & 0x0F)
                    w[j + QK // 2] = np.float32(byte >> 4)
                db, mb = d[r, b], m[r, b]
                for i in range(M):
                    s = np.float32(0.0)
                    for j in range(QK):
                        s += w[j] * x[i, b * QK + j]
                    acc[i] += db * s + mb * xsum[i, b]
            for i in range(M):
                out[i, r] = acc[i]


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _q8_0_matmul(x: np.ndarray, d: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:  # x (M, K), out (M, N)
    M, _K = x.shape
    N, nb = d.shape
    n_tasks = (N + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        w = np.empty(QK, np.float32)
        acc = np.empty(M, np.float32)
        for r in range(task * ROWS_PER_TASK, min(N, (task + 1) * ROWS_PER_TASK)):
            acc[:] = 0.0
            for b in range(nb):
                for j in range(QK):
                    w[j] = np.float32(q[r, b, j])
                db = d[r, b]
                for i in range(M):
                    s = np.float32(0.0)
                    for j in range(QK):
                        s += w[j] * x[i, b * QK + j]
                    acc[i] += db * s
            for i in range(M):
                out[i, r] = acc[i]


def quant_linear(x: np.ndarray, w: QuantMatrix) -> np.ndarray:
    """x (..., cols) @ W.T → (..., rows), reading W in its quantized blocks."""
    x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float32)
    out = np.empty((x2.shape[0], w.shape[0]), dtype=np.float32)
    if w.m is not None:  # Q4_1
        _q4_1_matmul(x2, w.d, w.m, w.q, out)
    else:
        _q8_0_matmul(x2, w.d, w.q, out)
    return out.reshape(*x.shape[:-1], w.shape[0])


def quant_linear_naive(x: np.ndarray, t: GGUFTensor) -> np.ndarray:
    """Reference: dequantize the whole matrix, then one float64 product."""
    return (x.astype(np.float64) @ dequantize(t).astype(np.float64).T).astype(np.float32)
