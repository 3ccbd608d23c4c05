"""Q4_1 / Q8_0 weights repacked at load for SIMD, and the numba matmuls that read them in place.

GGUF stores a weight row by row, block after block (32 weights per block). A kernel that walks
that layout must reduce 32 products to one number per block and row: a horizontal sum, which
SIMD does badly, and numba could not vectorize the block unpacking at all (it cannot prove the
output does not alias the input, so the 32 conversions stayed scalar). Here each chunk of
``CH`` consecutive rows is stored *transposed*: byte ``j`` of block ``b`` for all ``CH`` rows is
one contiguous run, ``q[chunk, b, j, 0:CH]``, and the per-block scale / min likewise
``d[chunk, b, 0:CH]``. Every inner loop then runs over ``CH`` independent rows with the same
``x`` value broadcast, which LLVM turns into vector FMAs with no horizontal sum (the layout
llama.cpp's "repacked" CPU kernels use, in spirit).

Bytes held per weight are those of the file's blocks: the scale and min stay float16 (their
bit patterns as uint16: numba has no float16 type), 0.625 (Q4_1) and 1.0625 (Q8_0) bytes per
weight. Each kernel widens one chunk's factors to float32 at a time (``_widen_f16``: integer
shifts and one multiply, vectorized; two widenings per 32 weights), so the copy held is the
file's size rather than 1.2× it, and a decode step reads 1/6 fewer bytes. Two kernels per kind:

- ``gemv`` (one input row, the decode step at batch 1): per block, ``blk = Σ_j q_j x_j`` over the
  raw integers, then ``y += d * blk + m * Σ_j x_j`` — the dequantized product regrouped, with no
  per-weight multiply by ``d``. From the ``avx2`` level on each thread's range of chunks runs
  ``packed_gemv_simd``'s vector IR (linked by name: ``_simd_gemv_*``), below it numba's loops
  (``chunk_gemv_*``), which the tests hold it equal to;
- ``gemm`` (M rows: batched decode, prefill): each chunk is dequantized once into a float32
  panel ``(K, CH)`` that stays in cache, then 4 input rows at a time stream over it, so the
  unpacking cost is paid once per weight per call whatever M is.

From ``BLAS_ROWS`` input rows on (prompt chunks, wide batches) neither runs: the whole matrix is
dequantized once into a per-thread float32 scratch (``_dequant_*``, W.T layout) and multiplied by
BLAS sgemm, whose blocking beats the panel loop by several times at large M; the scratch is one
matrix's float32 copy (7 MB for SmolLM2's gate/up), not the whole model's. Matrices above
``BLAS_MAX_ELEMENTS`` (the 49k-row output head) always stay on the packed gemm.

All but the dequantization are parallel (numba ``prange`` over chunks, or over one range of
chunks per thread for the IR; threads = numba's setting). The trade-off:
the repack is a one-off copy at load (~1 s), and results differ from ``x @ dequantize(W).T``
only by float32 summation order (the tests bound it against the float64 reference).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numba import get_num_threads, njit, prange, types

from openhood.engine.kernels import packed_gemv_simd
from openhood.engine.kernels.packed_layout import CH, PackedMatrix
from openhood.formats.gguf import QK

ROWS_PER_PASS = 4  # input rows sharing one pass over a dequantized panel (4 accumulators per weight load)
# From this many input rows on, dequantize the matrix once and call BLAS sgemm (packed_linear).
# Measured with benchmarks/generation_serving.py (docs/decoder.md § Weights): with the packed gemm's
# 4-row panel loop on the server's 128-token prompt chunks, the quantized server's TTFT P50 at 16
# streams was 2,113 ms against float32's 482; below 32 rows (decode steps) no dequantization runs.
BLAS_ROWS = 32
BLAS_MAX_ELEMENTS = 8 * 2**20  # bigger matrices (the 28M-weight output head) keep the packed gemm


# packed_gemv_simd's kernels as numba sees them: linked by name, so callers cache like any numba code
_simd_gemv_q4_1: Any = types.ExternalFunction(packed_gemv_simd.SYMBOLS["Q4_1"], types.void(*([types.int64] * 9)))
_simd_gemv_q8_0: Any = types.ExternalFunction(packed_gemv_simd.SYMBOLS["Q8_0"], types.void(*([types.int64] * 9)))

F16_TO_F32_SCALE = np.float32(2.0**112)  # rebias float16's exponent (bias 15) to float32's (bias 127)


@njit(fastmath=True, cache=True, nogil=True)
def _widen_f16(h: np.ndarray, out: np.ndarray, bits: np.ndarray) -> None:
    """out[:] = float32(h[:]) for finite float16 bit patterns h (uint16); bits: uint32 scratch.

    Exponent and mantissa shifted into float32's position read as a float32 2^112 times too
    small, for normal and subnormal values alike; one multiply restores it, the sign goes last."""
    n = h.size
    hf, of = h.reshape(n), out.reshape(n)
    for i in range(n):
        bits[i] = (np.uint32(hf[i]) & np.uint32(0x7FFF)) << np.uint32(13)
    f = bits[:n].view(np.float32)
    for i in range(n):
        v = f[i] * F16_TO_F32_SCALE
        of[i] = -v if hf[i] & 0x8000 else v


# ---- dequantize one chunk into a float32 panel (K, CH) -----------------------------------------
@njit(fastmath=True, cache=True, nogil=True)
def _panel_q4_1(d: np.ndarray, m: np.ndarray, q: np.ndarray, c: int, panel: np.ndarray) -> None:
    """d, m: chunk ``c``'s factors widened, (nb, CH) float32."""
    _nc, nb, half, ch = q.shape
    for b in range(nb):
        for j in range(half):
            lo, hi = panel[b * QK + j], panel[b * QK + half + j]  # (CH,) views
            for r in range(ch):
                byte = q[c, b, j, r]
                lo[r] = d[b, r] * np.float32(byte & 0x0F) + m[b, r]
                hi[r] = d[b, r] * np.float32(byte >> 4) + m[b, r]


@njit(fastmath=True, cache=True, nogil=True)
def _panel_q8_0(d: np.ndarray, q: np.ndarray, c: int, panel: np.ndarray) -> None:
    """d: chunk ``c``'s scales widened, (nb, CH) float32."""
    _nc, nb, qk, ch = q.shape
    for b in range(nb):
        for j in range(qk):
            row = panel[b * QK + j]
            for r in range(ch):
                row[r] = d[b, r] * np.float32(q[c, b, j, r])


@njit(fastmath=True, cache=True, nogil=True)
def _chunk_q4_1(d: np.ndarray, m: np.ndarray, q: np.ndarray, c: int, panel: np.ndarray) -> None:
    """Chunk ``c`` of a packed Q4_1 matrix dequantized into ``panel`` (K, CH): its factors widened, then unpacked."""
    nb, ch = q.shape[1], q.shape[3]
    dc, mc, bits = np.empty((nb, ch), np.float32), np.empty((nb, ch), np.float32), np.empty(nb * ch, np.uint32)
    _widen_f16(d[c], dc, bits)
    _widen_f16(m[c], mc, bits)
    _panel_q4_1(dc, mc, q, c, panel)


@njit(fastmath=True, cache=True, nogil=True)
def _chunk_q8_0(d: np.ndarray, q: np.ndarray, c: int, panel: np.ndarray) -> None:
    """Chunk ``c`` of a packed Q8_0 matrix dequantized into ``panel`` (K, CH)."""
    nb, ch = q.shape[1], q.shape[3]
    dc, bits = np.empty((nb, ch), np.float32), np.empty(nb * ch, np.uint32)
    _widen_f16(d[c], dc, bits)
    _panel_q8_0(dc, q, c, panel)


@njit(fastmath=True, cache=True, nogil=True)
def _panel_times_rows(
    x: np.ndarray, panel: np.ndarray, row0: int, n_rows: int, acc: np.ndarray, out: np.ndarray
) -> None:
    """out[:, row0:row0+n_rows] = x @ panel[:, :n_rows] for x (M, K), panel (K, CH); acc (4, CH) scratch."""
    M, K = x.shape
    ch = panel.shape[1]
    i = 0
    while i + ROWS_PER_PASS <= M:  # 4 input rows per pass: one panel load feeds 4 FMAs
        acc[:] = 0.0
        a0, a1, a2, a3 = acc[0], acc[1], acc[2], acc[3]
        for k in range(K):
            x0, x1, x2, x3 = x[i, k], x[i + 1, k], x[i + 2, k], x[i + 3, k]
            w = panel[k]
            for r in range(ch):
                a0[r] += w[r] * x0
                a1[r] += w[r] * x1
                a2[r] += w[r] * x2
                a3[r] += w[r] * x3
        for t in range(ROWS_PER_PASS):
            for r in range(n_rows):
                out[i + t, row0 + r] = acc[t, r]
        i += ROWS_PER_PASS
    while i < M:
        a0 = acc[0]
        a0[:] = 0.0
        for k in range(K):
            x0 = x[i, k]
            w = panel[k]
            for r in range(ch):
                a0[r] += w[r] * x0
        for r in range(n_rows):
            out[i, row0 + r] = a0[r]
        i += 1


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _gemm_q4_1(
    x: np.ndarray, d: np.ndarray, m: np.ndarray, q: np.ndarray, out: np.ndarray
) -> None:  # x (M, K), out (M, N)
    nc, _nb, _half, ch = q.shape
    N = out.shape[1]
    for c in prange(nc):
        panel = np.empty((x.shape[1], ch), np.float32)
        acc = np.empty((ROWS_PER_PASS, ch), np.float32)
        _chunk_q4_1(d, m, q, c, panel)
        _panel_times_rows(x, panel, c * ch, min(ch, N - c * ch), acc, out)


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _gemm_q8_0(x: np.ndarray, d: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:  # x (M, K), out (M, N)
    nc, _nb, _qk, ch = q.shape
    N = out.shape[1]
    for c in prange(nc):
        panel = np.empty((x.shape[1], ch), np.float32)
        acc = np.empty((ROWS_PER_PASS, ch), np.float32)
        _chunk_q8_0(d, q, c, panel)
        _panel_times_rows(x, panel, c * ch, min(ch, N - c * ch), acc, out)


# ---- many input rows: the whole matrix dequantized once, for BLAS ------------------------------
# Serial on purpose: every layer's matrices take ~75 ms of a 40-token prompt's ~190 ms on 2 cores,
# but parallel over chunks (numba's OpenMP workers) the prompt took ~1,050 ms: the workers spin
# after each call while OpenBLAS's threads run the sgemm on the same two cores (tried 6 Dec).
@njit(fastmath=True, cache=True, nogil=True)
def _dequant_q4_1(d: np.ndarray, m: np.ndarray, q: np.ndarray, wt: np.ndarray) -> None:  # wt (K, n_chunks * CH)
    ch = q.shape[3]
    for c in range(q.shape[0]):
        _chunk_q4_1(d, m, q, c, wt[:, c * ch : (c + 1) * ch])


@njit(fastmath=True, cache=True, nogil=True)
def _dequant_q8_0(d: np.ndarray, q: np.ndarray, wt: np.ndarray) -> None:  # wt (K, n_chunks * CH)
    ch = q.shape[3]
    for c in range(q.shape[0]):
        _chunk_q8_0(d, q, c, wt[:, c * ch : (c + 1) * ch])


_scratch = threading.local()  # each calling thread's float32 buffer for one dequantized matrix


def dequantized_t(w: PackedMatrix) -> np.ndarray:
    """W.T as float32 (cols, rows), in this thread's scratch: valid until its next call."""
    nc, nb = w.q.shape[0], w.q.shape[1]
    K, n_pad = nb * QK, nc * CH
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < K * n_pad:
        buf = _scratch.buf = np.empty(K * n_pad, np.float32)
    wt = buf[: K * n_pad].reshape(K, n_pad)
    if w.m is not None:
        _dequant_q4_1(w.d, w.m, w.q, wt)
    else:
        _dequant_q8_0(w.d, w.q, wt)
    return wt[:, : w.shape[0]]


# ---- one input row: integer weights times x, scaled once per block ----------------------------
@njit(fastmath=True, cache=True, nogil=True)
def block_sums(x: np.ndarray, xsum: np.ndarray) -> None:
    """xsum (nb,) = Σ x over each 32-wide block of x (nb * 32,): the Q4_1 min term's factor."""
    for b in range(xsum.size):
        s = np.float32(0.0)
        for j in range(QK):
            s += x[b * QK + j]
        xsum[b] = s


@njit(fastmath=True, cache=True, nogil=True)
def chunk_gemv_q4_1(
    x: np.ndarray, xsum: np.ndarray, d: np.ndarray, m: np.ndarray, q: np.ndarray, c: int, acc: np.ndarray
) -> None:
    """acc (CH,) = chunk ``c``'s rows of a packed Q4_1 matrix times x (K,); xsum from ``block_sums``.
    The numba kernel: ``packed_gemv_simd`` is the same sum with the accumulators in registers."""
    _nc, nb, half, ch = q.shape
    blk = np.empty(ch, np.float32)
    dc, mc, bits = np.empty((nb, ch), np.float32), np.empty((nb, ch), np.float32), np.empty(nb * ch, np.uint32)
    _widen_f16(d[c], dc, bits)
    _widen_f16(m[c], mc, bits)
    acc[:] = 0.0
    for b in range(nb):
        blk[:] = 0.0
        for j in range(half):
            xl, xh = x[b * QK + j], x[b * QK + half + j]
            for r in range(ch):
                byte = q[c, b, j, r]
                blk[r] += np.float32(byte & 0x0F) * xl + np.float32(byte >> 4) * xh
        xs = xsum[b]
        for r in range(ch):
            acc[r] += dc[b, r] * blk[r] + mc[b, r] * xs


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def gemv_q4_1(
    x: np.ndarray, d: np.ndarray, m: np.ndarray, q: np.ndarray, out: np.ndarray, simd: bool, threads: int
) -> None:
    """out (nc * CH,) = W x for a packed Q4_1 W, x (K,); rows past W's own stay padding. ``simd``:
    ``packed_gemv_simd``'s kernel (registered by the caller), one range of chunks per each of
    ``threads`` threads (numba's count, passed in: asking the threading layer from inside would
    keep the function out of numba's cache)."""
    nc, nb, _half, ch = q.shape
    xsum = np.empty(nb, np.float32)
    block_sums(x, xsum)
    if simd:
        for t in prange(threads):
            c0, c1 = nc * t // threads, nc * (t + 1) // threads
            _simd_gemv_q4_1(
                q.ctypes.data,
                d.ctypes.data,
                m.ctypes.data,
                x.ctypes.data,
                xsum.ctypes.data,
                nb,
                c0,
                c1,
                out.ctypes.data,
            )
    else:
        for c in prange(nc):
            chunk_gemv_q4_1(x, xsum, d, m, q, c, out[c * ch : (c + 1) * ch])


@njit(fastmath=True, cache=True, nogil=True)
def chunk_gemv_q8_0(x: np.ndarray, d: np.ndarray, q: np.ndarray, c: int, acc: np.ndarray) -> None:
    """acc (CH,) = chunk ``c``'s rows of a packed Q8_0 matrix times x (K,) (numba's loops)."""
    _nc, nb, qk, ch = q.shape
    blk = np.empty(ch, np.float32)
    dc, bits = np.empty((nb, ch), np.float32), np.empty(nb * ch, np.uint32)
    _widen_f16(d[c], dc, bits)
    acc[:] = 0.0
    for b in range(nb):
        blk[:] = 0.0
        for j in range(qk):
            xv = x[b * QK + j]
            for r in range(ch):
                blk[r] += np.float32(q[c, b, j, r]) * xv
        for r in range(ch):
            acc[r] += dc[b, r] * blk[r]


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def gemv_q8_0(x: np.ndarray, d: np.ndarray, q: np.ndarray, out: np.ndarray, simd: bool, threads: int) -> None:
    """out (nc * CH,) = W x for a packed Q8_0 W; as ``gemv_q4_1``."""
    nc, nb, _qk, ch = q.shape
    if simd:
        for t in prange(threads):
            c0, c1 = nc * t // threads, nc * (t + 1) // threads
            _simd_gemv_q8_0(q.ctypes.data, d.ctypes.data, d.ctypes.data, x.ctypes.data, 0, nb, c0, c1, out.ctypes.data)
    else:
        for c in prange(nc):
            chunk_gemv_q8_0(x, d, q, c, out[c * ch : (c + 1) * ch])


def packed_linear(x: np.ndarray, w: PackedMatrix) -> np.ndarray:
    """x (..., cols) @ W.T → (..., rows), reading W in its packed quantized blocks."""
    x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=np.float32)  # (M, K)
    if x2.shape[0] == 1:
        padded = np.empty(w.q.shape[0] * CH, np.float32)  # whole chunks: the SIMD kernels store 32 rows at a time
        simd, threads = packed_gemv_simd.register(), get_num_threads()
        if w.m is not None:
            gemv_q4_1(x2[0], w.d, w.m, w.q, padded, simd, threads)
        else:
            gemv_q8_0(x2[0], w.d, w.q, padded, simd, threads)
        return padded[: w.shape[0]].reshape(*x.shape[:-1], w.shape[0])  # the real rows, no copy
    out = np.empty((x2.shape[0], w.shape[0]), dtype=np.float32)  # (M, N)
    if x2.shape[0] >= BLAS_ROWS and w.shape[0] * w.shape[1] <= BLAS_MAX_ELEMENTS:
        np.matmul(x2, dequantized_t(w), out=out)
    elif w.m is not None:
        _gemm_q4_1(x2, w.d, w.m, w.q, out)
    else:
        _gemm_q8_0(x2, w.d, w.q, out)
    return out.reshape(*x.shape[:-1], w.shape[0])
