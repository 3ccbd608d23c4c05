"""A Llama-family decoder in NumPy: embedding, RMSNorm, RoPE, grouped-query attention, SwiGLU,
tied LM head; ``forward`` runs a batch of sequences against a ``KVCache``, ``forward_full`` is
the uncached reference it must equal.

Weights come from a GGUF file, either dequantized to float32 at load (``weights="float32"``:
every matmul is one BLAS sgemm) or kept in their Q4_1 / Q8_0 blocks, repacked for SIMD
(``weights="quantized"``: ``engine.kernels.packed_matmul``'s kernels, ~5× fewer bytes per decode step
and in memory). Q and K rows are un-permuted back to the Hugging Face layout so RoPE
rotates contiguous halves (see ``formats.gguf.unpermute_qk``); Q, K, V share one fused
(960, 576) matrix and gate/up one (3072, 576) matrix, so a layer is four matmuls.
The trade-off: float32 weights are ~5× the file in memory and in bytes read per decode step,
which bounds decode at batch 1; quantized weights save that and their kernels keep up with
BLAS at small batches, but prefill of long prompts is faster through sgemm (docs/decoder.md).

Batching (what a step scheduler drives): ``forward(tokens, slots, cache)`` takes B sequences,
each with its own KV-cache slot and its own number of new tokens: a prompt (prefill), one token
(decode), or anything between. Each sequence's new tokens sit at positions
``cache.lengths[slot] ...``. Rows are *packed*, not padded: every matmul runs over the N real
tokens of all rows, (N, D), so decode rows and a prompt chunk share one pass over the weights
and a 1-token row beside a 100-token chunk costs one row, not 100. Only attention is per group
(``attention_groups``: rows with the same number of new tokens, the decode rows being one
group), with a causal mask per row, so a batch of sequences at different positions is one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from openhood.engine.kernels.gguf_matmul import QuantMatrix
from openhood.engine.kernels.packed_layout import PackedMatrix
from openhood.engine.models.kv_cache import KVCache
from openhood.engine.models.llama_ops import masked_softmax_, rms_norm, rope_at, rope_half, swiglu
from openhood.engine.models.llama_weights import LayerWeights, Matrix, stack_layers

WEIGHT_MODES = ("quantized", "float32")  # Llama.from_gguf's ``weights``: blocks kept, or dequantized at load


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


def linear(x: np.ndarray, w: Matrix) -> np.ndarray:
    """x (..., in) @ w.T for w (out, in), as ONE 2-D sgemm over all rows (or one quantized kernel call).

    ``np.matmul`` on a (B, T, in) array would run B separate products, each re-reading the whole
    weight from memory: at decode (T = 1) that is B matrix-vector products instead of one
    matrix-matrix product, and batching would buy nothing.
    """
    if isinstance(w, PackedMatrix):
        # Imported here: the packed kernels are numba's (~0.4 s to import, more to load), which a
        # decoder holding float32 weights (the server's default) never calls.
        from openhood.engine.kernels.packed_matmul import packed_linear

        return packed_linear(x, w)
    return np.asarray((x.reshape(-1, x.shape[-1]) @ w.T).reshape(*x.shape[:-1], w.shape[0]))


@dataclass(frozen=True)
class AttentionGroup:
    """Rows of one forward that attend together: all have the same number of new tokens T."""

    slots: np.ndarray  # (Bg,) their KV-cache slots
    index: np.ndarray  # (Bg, T) their tokens' places on the packed axis
    keys: int  # S: cache positions read (the longest row's length after this forward)
    allowed: np.ndarray  # (Bg, 1, 1, T, S) causal mask, key ≤ the query's own position


def attention_groups(
    slots: np.ndarray, start: np.ndarray, n_new: np.ndarray, offsets: np.ndarray
) -> list[AttentionGroup]:
    """Split a forward's rows by their number of new tokens: the decode rows (T = 1) attend as one
    batch, each prompt length as another. Grouping by T keeps attention free of padded queries;
    keys are padded only to the group's longest row, and the mask hides a shorter row's tail."""
    groups = []
    for T in np.unique(n_new).tolist():
        rows = np.flatnonzero(n_new == T)
        index = offsets[rows][:, None] + np.arange(T)[None, :]  # (Bg, T)
        pos = start[rows][:, None] + np.arange(T)[None, :]  # (Bg, T) absolute positions
        S = int(pos.max()) + 1
        allowed = np.arange(S)[None, None, :] <= pos[:, :, None]  # (Bg, T, S)
        groups.append(AttentionGroup(slots[rows], index, S, allowed[:, None, None]))
    return groups


class NullLaps:
    """Stands in for a profiler: ``mark(label)`` does nothing on the normal path."""

    def mark(self, label: str, flops: int = 0, nbytes: int = 0) -> None:
        pass


class Llama:
    def __init__(self, config: LlamaConfig, embed: Matrix, layers: list[LayerWeights], out_norm: np.ndarray):
        self.config = config
        self.embed = embed  # (V, D) float32 or PackedMatrix; also the LM head (tied)
        # every layer Q4_1: one array per role for the one-call decode step, the layers views into it
        self.stacks, self.layers = stack_layers(layers)
        self.out_norm = out_norm
        # A batch-1 decode step runs all layers in one compiled call (``llama_step``) when the
        # weights allow it; False keeps every step on the general path (the tests compare both).
        self.fused_decode = True
        self._warm = False  # set by the first decode step (see forward)
        # Called once, after that first decode step: by then every kernel of the step loop is
        # compiled. The caller hangs its process tuning here (``generate.Generator`` gives back
        # the JIT compiler's pages); the engine itself knows nothing of the process.
        self.after_warm_up: Callable[[], object] | None = None

    @classmethod
    def from_gguf(cls, path: Any, weights: str = "float32") -> Llama:
        """Load a llama GGUF; ``weights`` is "float32" (dequantize at load) or "quantized" (keep blocks)."""
        from openhood.formats.gguf import GGUFFile, dequantize, unpermute_qk

        if weights not in WEIGHT_MODES:
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_MODES)}, not {weights!r}")
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
    def layer_bytes(self) -> int:
        """Bytes of every layer's weights as held (ndarray and PackedMatrix both have nbytes)."""
        return sum(
            int(w.nbytes) for L in self.layers for w in (L.attn_norm, L.wqkv, L.wo, L.ffn_norm, L.w_gate_up, L.w_down)
        )

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights as held (what one batch-1 decode step must read)."""
        return self.layer_bytes + int(self.embed.nbytes) + int(self.out_norm.nbytes)

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
        if self.stacks is not None and self.fused_decode and n_new.tolist() == [1]:
            return self._decode_one(int(np.asarray(tokens[0]).reshape(-1)[0]), int(slots[0]), cache, laps)
        start = cache.lengths[slots].copy()  # (B,) position of each row's first new token
        ends = np.cumsum(n_new)
        offsets = ends - n_new  # (B,) each row's first token on the packed axis
        N = int(ends[-1])
        row = np.repeat(np.arange(len(tokens)), n_new)  # (N,) the row each packed token belongs to
        pos = start[row] + np.arange(N) - offsets[row]  # (N,) absolute positions
        cos, sin = (a[None] for a in rope_at(pos, c.head_dim, c.rope_base))  # (1, N, hd/2)
        groups = attention_groups(slots, start, n_new, offsets)
        x = self.embed_rows(np.concatenate([np.asarray(t, dtype=np.int64).reshape(-1) for t in tokens]))  # (N, D)
        laps.mark("embedding", nbytes=x.nbytes)
        for li, L in enumerate(self.layers):
            h = self._attention(
                rms_norm(x, L.attn_norm, c.norm_eps), L, li, slots, start, n_new, offsets, cos, sin, cache, groups, laps
            )
            x = x + h
            x = x + self._mlp(x, L, laps)
        cache.lengths[slots] = start + n_new
        last = x[ends - 1]  # (B, D) each row's last token
        out = rms_norm(last, self.out_norm, c.norm_eps)
        laps.mark("rmsnorm", nbytes=out.nbytes * 2)
        logits = linear(out, self.embed)  # (B, V)
        laps.mark("matmul lm_head", flops=2 * len(tokens) * c.vocab_size * c.dim, nbytes=self.embed.nbytes)
        if len(tokens) == N:  # one new token per row
            self._decode_step_done()
        return logits

    def _decode_step_done(self) -> None:
        """After the first decode step every kernel of the step loop has been compiled (or loaded
        from numba's cache), so what only compiling needed can go: the caller's hook, once."""
        if not self._warm:
            self._warm = True
            if self.after_warm_up is not None:
                self.after_warm_up()

    def _decode_one(self, token: int, slot: int, cache: KVCache, laps: Any) -> np.ndarray:
        """``forward`` for one sequence and one new token, all layers in one compiled call: logits (1, V)."""
        from openhood.engine.models.llama_step import run_layers  # numba's: only quantized weights import it

        c = self.config
        assert self.stacks is not None
        pos = int(cache.lengths[slot])
        cos, sin = rope_at(np.array([pos]), c.head_dim, c.rope_base)  # (1, hd/2)
        x = self.embed_rows(np.array([token]))[0]  # (D,)
        laps.mark("embedding", nbytes=x.nbytes)
        x = run_layers(self.stacks, x, pos, cos[0], sin[0], c.norm_eps, c.n_heads, cache.k, cache.v, slot)
        cache.lengths[slot] = pos + 1
        laps.mark("layers (one compiled call)", nbytes=self.stacks.nbytes)
        out = rms_norm(x[None], self.out_norm, c.norm_eps)  # (1, D)
        laps.mark("rmsnorm", nbytes=out.nbytes * 2)
        logits = linear(out, self.embed)  # (1, V)
        laps.mark("matmul lm_head", flops=2 * c.vocab_size * c.dim, nbytes=self.embed.nbytes)
        self._decode_step_done()
        return logits

    def _attention(
        self,
        xn: np.ndarray,
        L: LayerWeights,
        li: int,
        slots: np.ndarray,
        start: np.ndarray,
        n_new: np.ndarray,
        offsets: np.ndarray,
        cos: np.ndarray,
        sin: np.ndarray,
        cache: KVCache,
        groups: list[AttentionGroup],
        laps: Any,
    ) -> np.ndarray:
        c = self.config
        N, D = xn.shape
        H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim
        G = H // Hkv  # query heads per kv head
        laps.mark("rmsnorm", nbytes=xn.nbytes * 2)
        qkv = linear(xn, L.wqkv)  # (N, D + 2 * Hkv * hd)
        laps.mark("matmul qkv", flops=2 * N * D * L.wqkv.shape[0], nbytes=L.wqkv.nbytes)
        q = rope_half(qkv[None, :, :D].reshape(1, N, H, hd), cos, sin)[0]  # (N, H, hd)
        k = rope_half(qkv[None, :, D : D + Hkv * hd].reshape(1, N, Hkv, hd), cos, sin)[0]  # (N, Hkv, hd)
        v = qkv[:, D + Hkv * hd :].reshape(N, Hkv, hd)
        laps.mark("rope", nbytes=(q.nbytes + k.nbytes) * 2)
        for b, (o, n) in enumerate(zip(offsets.tolist(), n_new.tolist(), strict=True)):
            cache.write(li, int(slots[b]), int(start[b]), k[o : o + n], v[o : o + n])
        ctx = np.empty((N, D), dtype=np.float32)
        flops = 0
        for g in groups:
            Bg, T = g.index.shape
            S = g.keys
            K, V = cache.view(li, g.slots, S)  # (Bg, Hkv, S, hd)
            # query head h uses kv head h // G: group the G heads of one kv head into the row axis.
            qg = q[g.index].reshape(Bg, T, Hkv, G, hd).transpose(0, 2, 3, 1, 4)  # (Bg, Hkv, G, T, hd)
            scores = (qg.reshape(Bg, Hkv, G * T, hd) @ K.transpose(0, 1, 3, 2)).reshape(Bg, Hkv, G, T, S)
            scores *= np.float32(1.0 / np.sqrt(hd))
            masked_softmax_(scores, g.allowed)
            out = (scores.reshape(Bg, Hkv, G * T, S) @ V).reshape(Bg, Hkv, G, T, hd)
            ctx[g.index.reshape(-1)] = out.transpose(0, 3, 1, 2, 4).reshape(Bg * T, D)  # heads back in order
            flops += 4 * Bg * H * T * S * hd
        laps.mark("attention", flops=flops, nbytes=sum(2 * len(g.slots) * Hkv * g.keys * hd * 4 for g in groups))
        out = linear(ctx, L.wo)
        laps.mark("matmul wo", flops=2 * N * D * D, nbytes=L.wo.nbytes)
        return out

    def _mlp(self, x: np.ndarray, L: LayerWeights, laps: Any) -> np.ndarray:
        c = self.config
        xn = rms_norm(x, L.ffn_norm, c.norm_eps)
        laps.mark("rmsnorm", nbytes=xn.nbytes * 2)
        gu = linear(xn, L.w_gate_up)  # (N, 2F)
        rows = xn.shape[0]
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
        cos, sin = (a[None] for a in rope_at(np.arange(T), c.head_dim, c.rope_base))  # (1, T, hd/2)
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
