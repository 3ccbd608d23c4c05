"""A Llama-family decoder in NumPy: embedding, RMSNorm, RoPE, grouped-query attention, SwiGLU,
tied LM head; ``forward`` runs a batch of sequences against a ``KVCache``, ``forward_full`` is
the uncached reference it must equal.

Weights come from a GGUF file, either dequantized to float32 at load (``weights="float32"``:
every matmul is one BLAS sgemm) or kept in their Q4_1 / Q8_0 blocks, repacked for SIMD
(``weights="quantized"``: ``engine.packed_matmul``'s kernels, ~5× fewer bytes per decode step
and in memory). Q and K rows are un-permuted back to the Hugging Face layout so RoPE
rotates contiguous halves (see ``formats.gguf.unpermute_qk``); Q, K, V share one fused
(960, 576) matrix and gate/up one (3072, 576) matrix, so a layer is four matmuls.
The trade-off: float32 weights are ~5× the file in memory and in bytes read per decode step,
which bounds decode at batch 1; quantized weights save that and their kernels keep up with
BLAS at small batches, but prefill of long prompts is faster through sgemm (docs/decoder.md).

Batching (what a step scheduler drives): ``forward(tokens, slots, cache)`` takes B sequences,
each with its own KV-cache slot and its own number of new tokens: a prompt (prefill), one token
(decode), or anything between. Each sequence's new tokens sit at positions
``cache.lengths[slot] ...``; rows are right-padded to the longest and a mask
``key ≤ query position`` per row (causal) that also stops at each row's own length (padding)
keeps them independent, so a batch of sequences at different positions is one call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from openhood.engine.gguf_matmul import QuantMatrix
from openhood.engine.kv_cache import KVCache
from openhood.engine.llama_ops import masked_softmax_, rms_norm, rope_half, rope_tables, swiglu
from openhood.engine.packed_matmul import PackedMatrix, packed_linear

Matrix = np.ndarray | PackedMatrix  # a weight as held: float32 array or packed quantized blocks


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    dim: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    context_length: int
    rope_base: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @classmethod
    def from_gguf(cls, g: Any) -> LlamaConfig:
        arch = g.require("general.architecture")
        if arch != "llama":
            raise ValueError(f"{g.path}: architecture {arch!r} is not supported (only 'llama')")
        p = f"{arch}."
        dim, heads = int(g.require(p + "embedding_length")), int(g.require(p + "attention.head_count"))
        rope_dims = int(g.get(p + "rope.dimension_count", dim // heads))
        if rope_dims != dim // heads:
            raise ValueError(f"{g.path}: partial RoPE ({rope_dims} of {dim // heads} dims) is not supported")
        return cls(
            n_layers=int(g.require(p + "block_count")),
            dim=dim,
            ffn_dim=int(g.require(p + "feed_forward_length")),
            n_heads=heads,
            n_kv_heads=int(g.get(p + "attention.head_count_kv", heads)),
            vocab_size=len(g.require("tokenizer.ggml.tokens")),
            context_length=int(g.require(p + "context_length")),
            rope_base=float(g.get(p + "rope.freq_base", 10000.0)),
            norm_eps=float(g.require(p + "attention.layer_norm_rms_epsilon")),
        )


@dataclass
class LayerWeights:
    """Matrices are float32 arrays or ``PackedMatrix`` (same (out, in) shape either way)."""

    attn_norm: np.ndarray  # (D,)
    wqkv: Matrix  # (D + 2 * kv_dim, D): Q, K, V rows stacked, Q/K in HF (half-split) layout
    wo: Matrix  # (D, D)
    ffn_norm: np.ndarray  # (D,)
    w_gate_up: Matrix  # (2 * F, D): gate rows then up rows
    w_down: Matrix  # (D, F)


def linear(x: np.ndarray, w: Matrix) -> np.ndarray:
    """x (..., in) @ w.T for w (out, in), as ONE 2-D sgemm over all rows (or one quantized kernel call).

    ``np.matmul`` on a (B, T, in) array would run B separate products, each re-reading the whole
    weight from memory: at decode (T = 1) that is B matrix-vector products instead of one
    matrix-matrix product, and batching would buy nothing.
    """
    if isinstance(w, PackedMatrix):
        return packed_linear(x, w)
    return np.asarray((x.reshape(-1, x.shape[-1]) @ w.T).reshape(*x.shape[:-1], w.shape[0]))


class NullLaps:
    """Stands in for a profiler: ``mark(label)`` does nothing on the normal path."""

    def mark(self, label: str, flops: int = 0, nbytes: int = 0) -> None:
        pass


class Llama:
    def __init__(self, config: LlamaConfig, embed: Matrix, layers: list[LayerWeights], out_norm: np.ndarray):
        self.config = config
        self.embed = embed  # (V, D) float32 or PackedMatrix; also the LM head (tied)
        self.layers = layers
        self.out_norm = out_norm
        self.cos, self.sin = rope_tables(config.context_length, config.head_dim, config.rope_base)  # (ctx, hd/2)

    @classmethod
    def from_gguf(cls, path: Any, weights: str = "float32") -> Llama:
        """Load a llama GGUF; ``weights`` is "float32" (dequantize at load) or "quantized" (keep blocks)."""
        from openhood.formats.gguf import GGUFFile, dequantize, unpermute_qk

        if weights not in ("float32", "quantized"):
            raise ValueError(f"weights must be 'float32' or 'quantized', not {weights!r}")
        g = path if isinstance(path, GGUFFile) else GGUFFile(path)
        cfg = LlamaConfig.from_gguf(g)
        if "output.weight" in g.tensors:
            raise ValueError(f"{g.path}: an untied output.weight is not supported (SmolLM2 ties it to the embedding)")
        quantized = weights == "quantized"

        def matrix(name: str, qk_heads: int = 0) -> np.ndarray | QuantMatrix:
            t = g.tensors[name]
            if quantized and t.kind in ("Q4_1", "Q8_0"):
                qm = QuantMatrix.from_tensor(t)
                if qk_heads:  # the same row permutation, applied to block rows
                    qm = qm.permute_rows(unpermute_qk(np.arange(t.shape[0])[:, None], qk_heads)[:, 0])
                return qm
            w = dequantize(t)
            return unpermute_qk(w, qk_heads) if qk_heads else w

        def packed(w: np.ndarray | QuantMatrix) -> Matrix:
            return PackedMatrix.from_quant(w) if isinstance(w, QuantMatrix) else w

        def fuse(parts: list[np.ndarray | QuantMatrix]) -> Matrix:
            quant = [p for p in parts if isinstance(p, QuantMatrix)]
            if len(quant) == len(parts) and len({p.kind for p in quant}) == 1:
                return packed(QuantMatrix.stack(quant))
            arrays = [p if isinstance(p, np.ndarray) else p.dequantize() for p in parts]
            return np.ascontiguousarray(np.concatenate(arrays))

        layers = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            layers.append(
                LayerWeights(
                    attn_norm=g.dequantize(p + "attn_norm.weight"),
                    wqkv=fuse(
                        [
                            matrix(p + "attn_q.weight", cfg.n_heads),
                            matrix(p + "attn_k.weight", cfg.n_kv_heads),
                            matrix(p + "attn_v.weight"),
                        ]
                    ),
                    wo=packed(matrix(p + "attn_output.weight")),
                    ffn_norm=g.dequantize(p + "ffn_norm.weight"),
                    w_gate_up=fuse([matrix(p + "ffn_gate.weight"), matrix(p + "ffn_up.weight")]),
                    w_down=packed(matrix(p + "ffn_down.weight")),
                )
            )
        return cls(cfg, packed(matrix("token_embd.weight")), layers, g.dequantize("output_norm.weight"))

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        """Token embeddings (..., D) of ``ids`` (...)."""
        if isinstance(self.embed, PackedMatrix):
            return self.embed.rows(ids.reshape(-1)).reshape(*ids.shape, self.config.dim)
        return np.asarray(self.embed[ids])

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights as held (what one batch-1 decode step must read)."""
        total = int(self.embed.nbytes) + int(self.out_norm.nbytes)  # ndarray and PackedMatrix both have nbytes
        for L in self.layers:
            total += sum(int(w.nbytes) for w in (L.attn_norm, L.wqkv, L.wo, L.ffn_norm, L.w_gate_up, L.w_down))
        return total

    def new_cache(self, n_slots: int, max_len: int) -> KVCache:
        c = self.config
        return KVCache(c.n_layers, c.n_kv_heads, c.head_dim, n_slots, min(max_len, c.context_length))

    # ---- the cached, batched forward ---------------------------------------------------------
    def forward(self, tokens: list[np.ndarray], slots: Any, cache: KVCache, laps: Any = None) -> np.ndarray:
        """Append ``tokens[b]`` to sequence ``slots[b]`` and return each row's next-token logits (B, V).

        ``tokens[b]`` may be a whole prompt or one token; rows are independent sequences.
        """
        laps = laps or NullLaps()
        c = self.config
        slots = np.asarray(slots, dtype=np.int64)
        n_new = np.array([len(t) for t in tokens], dtype=np.int64)  # (B,)
        if (n_new < 1).any():
            raise ValueError("every sequence needs at least one new token")
        cache.check_room(slots, n_new)
        B, T = len(tokens), int(n_new.max())
        start = cache.lengths[slots].copy()  # (B,) position of each row's first new token
        ids = np.zeros((B, T), dtype=np.int64)
        for b, t in enumerate(tokens):
            ids[b, : len(t)] = t
        pos = start[:, None] + np.arange(T)[None, :]  # (B, T) absolute positions (padded rows run past, masked)
        pos_c = np.minimum(pos, c.context_length - 1)
        cos, sin = self.cos[pos_c], self.sin[pos_c]  # (B, T, hd/2)
        n_keys = int((start + n_new).max())
        key_pos = np.arange(n_keys)[None, None, :]  # (1, 1, S)
        # (B, T, S): causal (key ≤ query position) and inside the row's own tokens (padding).
        allowed = (key_pos <= pos[:, :, None]) & (key_pos < (start + n_new)[:, None, None])
        allowed |= key_pos == 0  # padded query rows keep one finite key; their outputs are dropped
        allowed = allowed[:, None, None]  # (B, 1, 1, T, S) over kv heads and groups
        x = self.embed_rows(ids)  # (B, T, D)
        laps.mark("embedding", nbytes=x.nbytes)
        for li, L in enumerate(self.layers):
            h = self._attention(
                rms_norm(x, L.attn_norm, c.norm_eps), L, li, slots, start, n_new, cos, sin, cache, n_keys, allowed, laps
            )
            x = x + h
            x = x + self._mlp(x, L, laps)
        cache.lengths[slots] = start + n_new
        last = x[np.arange(B), n_new - 1]  # (B, D) each row's last real token
        out = rms_norm(last, self.out_norm, c.norm_eps)
        laps.mark("rmsnorm", nbytes=out.nbytes * 2)
        logits = linear(out, self.embed)  # (B, V)
        laps.mark("matmul lm_head", flops=2 * B * c.vocab_size * c.dim, nbytes=self.embed.nbytes)
        return logits

    def _attention(
        self,
        xn: np.ndarray,
        L: LayerWeights,
        li: int,
        slots: np.ndarray,
        start: np.ndarray,
        n_new: np.ndarray,
        cos: np.ndarray,
        sin: np.ndarray,
        cache: KVCache,
        n_keys: int,
        allowed: np.ndarray,
        laps: Any,
    ) -> np.ndarray:
        c = self.config
        B, T, D = xn.shape
        H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim
        G = H // Hkv  # query heads per kv head
        laps.mark("rmsnorm", nbytes=xn.nbytes * 2)
        qkv = linear(xn, L.wqkv)  # (B, T, D + 2 * Hkv * hd)
        laps.mark("matmul qkv", flops=2 * B * T * D * L.wqkv.shape[0], nbytes=L.wqkv.nbytes)
        q = qkv[..., :D].reshape(B, T, H, hd)
        k = qkv[..., D : D + Hkv * hd].reshape(B, T, Hkv, hd)
        v = qkv[..., D + Hkv * hd :].reshape(B, T, Hkv, hd)
        q, k = rope_half(q, cos, sin), rope_half(k, cos, sin)
        laps.mark("rope", nbytes=(q.nbytes + k.nbytes) * 2)
        for b in range(B):
            cache.write(li, int(slots[b]), int(start[b]), k[b, : n_new[b]], v[b, : n_new[b]])
        K, V = cache.view(li, slots, n_keys)  # (B, Hkv, S, hd)
        # query head h uses kv head h // G: group the G heads of one kv head into the row axis.
        qg = q.reshape(B, T, Hkv, G, hd).transpose(0, 2, 3, 1, 4)  # (B, Hkv, G, T, hd)
        scores = (qg.reshape(B, Hkv, G * T, hd) @ K.transpose(0, 1, 3, 2)).reshape(B, Hkv, G, T, n_keys)
        scores *= np.float32(1.0 / np.sqrt(hd))
        masked_softmax_(scores, allowed)
        ctx = (scores.reshape(B, Hkv, G * T, n_keys) @ V).reshape(B, Hkv, G, T, hd)
        ctx = ctx.transpose(0, 3, 1, 2, 4).reshape(B, T, D)  # heads back in order h = kv * G + g
        laps.mark("attention", flops=4 * B * H * T * n_keys * hd, nbytes=K.nbytes + V.nbytes)
        out = linear(ctx, L.wo)
        laps.mark("matmul wo", flops=2 * B * T * D * D, nbytes=L.wo.nbytes)
        return out

    def _mlp(self, x: np.ndarray, L: LayerWeights, laps: Any) -> np.ndarray:
        c = self.config
        xn = rms_norm(x, L.ffn_norm, c.norm_eps)
        laps.mark("rmsnorm", nbytes=xn.nbytes * 2)
        gu = linear(xn, L.w_gate_up)  # (B, T, 2F)
        rows = xn.shape[0] * xn.shape[1]
        laps.mark("matmul gate_up", flops=2 * rows * c.dim * 2 * c.ffn_dim, nbytes=L.w_gate_up.nbytes)
        a = swiglu(gu[..., : c.ffn_dim], gu[..., c.ffn_dim :])
        laps.mark("swiglu", nbytes=gu.nbytes + a.nbytes)
        out = linear(a, L.w_down)
        laps.mark("matmul down", flops=2 * rows * c.dim * c.ffn_dim, nbytes=L.w_down.nbytes)
        return out

    # ---- the uncached reference -----------------------------------------------------------------
    def forward_full(self, ids: Any) -> np.ndarray:
        """Logits (T, V) for every position of one sequence, recomputing attention over the whole
        prefix with a plain causal mask and no cache: the textbook model ``forward`` must equal."""
        c = self.config
        ids = np.asarray(ids, dtype=np.int64)
        T, H, Hkv, hd = len(ids), c.n_heads, c.n_kv_heads, c.head_dim
        G = H // Hkv
        cos, sin = self.cos[None, :T], self.sin[None, :T]  # (1, T, hd/2)
        causal = np.tril(np.ones((T, T), dtype=bool))
        x = self.embed_rows(ids)  # (T, D)
        for L in self.layers:
            qkv = linear(rms_norm(x, L.attn_norm, c.norm_eps), L.wqkv)
            q = rope_half(qkv[None, :, : c.dim].reshape(1, T, H, hd), cos, sin)[0]  # (T, H, hd)
            k = rope_half(qkv[None, :, c.dim : c.dim + Hkv * hd].reshape(1, T, Hkv, hd), cos, sin)[0]
            v = qkv[:, c.dim + Hkv * hd :].reshape(T, Hkv, hd)
            heads = []
            for h in range(H):
                s = q[:, h] @ k[:, h // G].T / np.float32(np.sqrt(hd))  # (T, T)
                s = np.where(causal, s, -np.inf)
                p = np.exp(s - s.max(axis=1, keepdims=True))
                heads.append((p / p.sum(axis=1, keepdims=True)) @ v[:, h // G])  # (T, hd)
            x = x + linear(np.concatenate(heads, axis=1), L.wo)
            gu = linear(rms_norm(x, L.ffn_norm, c.norm_eps), L.w_gate_up)
            x = x + linear(swiglu(gu[:, : c.ffn_dim], gu[:, c.ffn_dim :]), L.w_down)
        return linear(rms_norm(x, self.out_norm, c.norm_eps), self.embed)


class OpLaps:
    """Per-op timer for one or more forwards: ``mark(label)`` charges the time since the previous mark."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.flops: dict[str, int] = {}
        self.nbytes: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._last = time.perf_counter()

    def restart(self) -> None:
        self._last = time.perf_counter()

    def mark(self, label: str, flops: int = 0, nbytes: int = 0) -> None:
        now = time.perf_counter()
        self.seconds[label] = self.seconds.get(label, 0.0) + now - self._last
        self.flops[label] = self.flops.get(label, 0) + flops
        self.nbytes[label] = self.nbytes.get(label, 0) + nbytes
        self.calls[label] = self.calls.get(label, 0) + 1
        self._last = now
