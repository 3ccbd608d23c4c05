"""One decode step of a quantized Llama at batch 1, every layer in one compiled call.

At batch 1 a decode step is ~4 matrix-vector products and a handful of tiny vector ops per
layer. Run op by op from Python (``Llama.forward``) each op is a NumPy or numba call of a few
to a few hundred microseconds, ~300 NumPy calls and ~120 parallel kernel launches per token
for SmolLM2's 30 layers, and the per-call costs (dispatch, temporaries, the kernel threads
going idle between launches) exceeded the matrix work (``benchmarks/decoder.py``'s profile).
Here one numba function walks all layers: RMSNorm, the fused QKV product, RoPE, the KV-cache
write, attention over the slot's positions, the output projection, the SwiGLU MLP and the
residuals, with the products parallel over row chunks (``prange``) and everything between them
on the calling thread, so the worker threads stay awake from one product to the next.

The products are ``packed_matmul.gemv_q4_1``, the kernel ``Llama.forward`` calls at batch 1
(``packed_gemv_simd``'s vector IR from the ``avx2`` level on, numba's loops below it); the
element-wise ops are the loops of ``llama_ops``' formulas in float32, so the two paths differ by
float32 summation order only. Ad-hoc A/B (2 threads, AMD EPYC, SmolLM2, 128 greedy tokens after a
100-token prompt), ms per token op by op → in one call: 23.5 → 14.7 with numba's gemv, 14.8 → 7.5
with the vector IR; ``benchmarks/decoder.py`` has the end-to-end figures.

The trade-off: this path holds only for the shape it is written for, every layer's four
matrices Q4_1 (``LayerStacks``) and one new token for one sequence; anything else (prompts,
batched decode, float32 weights, other block kinds) stays on ``Llama.forward``'s general path,
which the tests hold it equal to.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from openhood.engine.kernels import packed_gemv_simd
from openhood.engine.kernels.packed_layout import CH
from openhood.engine.kernels.packed_matmul import gemv_q4_1
from openhood.engine.models.llama_weights import LayerStacks
from openhood.formats.gguf import QK


@njit(fastmath=True, cache=True, nogil=True)
def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float, out: np.ndarray) -> None:
    """out = x / sqrt(mean(x²) + eps) * w, for x, w, out (D,)."""
    s = np.float32(0.0)
    for i in range(x.size):
        s += x[i] * x[i]
    inv = np.float32(1.0) / np.sqrt(s / np.float32(x.size) + np.float32(eps))
    for i in range(x.size):
        out[i] = x[i] * inv * w[i]


@njit(fastmath=True, cache=True, nogil=True)
def _rope(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> None:
    """Rotate one head v (hd,) in place, first half against second (``llama_ops.rope_half``)."""
    h = v.size // 2
    for i in range(h):
        a, b = v[i], v[h + i]
        v[i] = a * cos[i] - b * sin[i]
        v[h + i] = b * cos[i] + a * sin[i]


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _attend(
    qkv: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, n_heads: int, n_keys: int, ctx: np.ndarray
) -> None:
    """ctx (H * hd,) = softmax(q_h · K / sqrt(hd)) V for every query head h, over the first
    ``n_keys`` positions of its kv head: k_cache, v_cache (Hkv, max_len, hd) one layer and slot."""
    n_kv, _max_len, hd = k_cache.shape
    group = n_heads // n_kv
    scale = np.float32(1.0 / math.sqrt(hd))
    for h in prange(n_heads):
        keys, values = k_cache[h // group], v_cache[h // group]  # (max_len, hd)
        q = np.empty(hd, np.float32)  # the head's query, scaled once instead of every score
        for i in range(hd):
            q[i] = qkv[h * hd + i] * scale
        scores = np.empty(n_keys, np.float32)
        for s in range(n_keys):
            acc = np.float32(0.0)
            for i in range(hd):
                acc += q[i] * keys[s, i]
            scores[s] = acc
        top = scores.max()  # its own pass: a running max inside the dot-product loop measured slower
        total = np.float32(0.0)
        for s in range(n_keys):
            scores[s] = np.exp(scores[s] - top)
            total += scores[s]
        inv = np.float32(1.0) / total
        out = np.zeros(hd, np.float32)
        for s in range(n_keys):
            p = scores[s] * inv
            for i in range(hd):
                out[i] += p * values[s, i]
        ctx[h * hd : (h + 1) * hd] = out


@njit(fastmath=True, cache=True, nogil=True)
def decode_layers(
    x: np.ndarray,
    pos: int,
    cos: np.ndarray,
    sin: np.ndarray,
    attn_norm: np.ndarray,
    ffn_norm: np.ndarray,
    eps: float,
    qkv_d: np.ndarray,
    qkv_m: np.ndarray,
    qkv_q: np.ndarray,
    wo_d: np.ndarray,
    wo_m: np.ndarray,
    wo_q: np.ndarray,
    gu_d: np.ndarray,
    gu_m: np.ndarray,
    gu_q: np.ndarray,
    dn_d: np.ndarray,
    dn_m: np.ndarray,
    dn_q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    slot: int,
    n_heads: int,
    simd: bool,
    threads: int,
) -> None:
    """x (D,) the new token's embedding → its hidden state after every layer, in place.

    Writes the token's keys and values at position ``pos`` of ``slot`` (caches (L, slots, Hkv,
    max_len, hd)); cos, sin (hd / 2,) at ``pos``. Stacked weights as in ``LayerStacks``."""
    n_layers, D = attn_norm.shape
    n_kv, hd = k_cache.shape[2], k_cache.shape[4]
    F = dn_q.shape[2] * QK  # the down projection's input width
    kv_dim = n_kv * hd
    xn = np.empty(D, np.float32)
    ctx = np.empty(D, np.float32)
    act = np.empty(F, np.float32)
    # product outputs in whole chunks of CH rows (what the kernels store); the model's rows first
    qkv = np.empty(qkv_q.shape[1] * CH, np.float32)
    h = np.empty(max(wo_q.shape[1], dn_q.shape[1]) * CH, np.float32)
    gu = np.empty(gu_q.shape[1] * CH, np.float32)
    for layer in range(n_layers):
        _rms_norm(x, attn_norm[layer], eps, xn)
        gemv_q4_1(xn, qkv_d[layer], qkv_m[layer], qkv_q[layer], qkv, simd, threads)
        for head in range(n_heads):
            _rope(qkv[head * hd : (head + 1) * hd], cos, sin)
        for kv in range(n_kv):
            k = qkv[D + kv * hd : D + (kv + 1) * hd]
            _rope(k, cos, sin)
            k_cache[layer, slot, kv, pos] = k
            v_cache[layer, slot, kv, pos] = qkv[D + kv_dim + kv * hd : D + kv_dim + (kv + 1) * hd]
        _attend(qkv, k_cache[layer, slot], v_cache[layer, slot], n_heads, pos + 1, ctx)
        gemv_q4_1(ctx, wo_d[layer], wo_m[layer], wo_q[layer], h, simd, threads)
        for i in range(D):
            x[i] += h[i]
        _rms_norm(x, ffn_norm[layer], eps, xn)
        gemv_q4_1(xn, gu_d[layer], gu_m[layer], gu_q[layer], gu, simd, threads)
        for i in range(F):
            g = gu[i]
            act[i] = g / (np.float32(1.0) + np.exp(-g)) * gu[F + i]
        gemv_q4_1(act, dn_d[layer], dn_m[layer], dn_q[layer], h, simd, threads)
        for i in range(D):
            x[i] += h[i]


def run_layers(
    stacks: LayerStacks,
    x: np.ndarray,
    pos: int,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float,
    n_heads: int,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    slot: int,
) -> np.ndarray:
    """The hidden state (D,) of one token at ``pos`` of ``slot`` after all layers (x (D,) its embedding)."""
    s = stacks
    x = np.array(x, dtype=np.float32)  # a copy: the step updates it in place
    decode_layers(
        x,
        pos,
        cos,
        sin,
        s.attn_norm,
        s.ffn_norm,
        eps,
        s.wqkv.d,
        s.wqkv.m,
        s.wqkv.q,
        s.wo.d,
        s.wo.m,
        s.wo.q,
        s.w_gate_up.d,
        s.w_gate_up.m,
        s.w_gate_up.q,
        s.w_down.d,
        s.w_down.m,
        s.w_down.q,
        k_cache,
        v_cache,
        slot,
        n_heads,
        packed_gemv_simd.register(),
        get_num_threads(),
    )
    return x
