"""The Llama decoder's element-wise ops: RMSNorm, RoPE (two conventions), SwiGLU, masked softmax.

Each fast op is a few whole-array NumPy expressions in float32; the naive reference beside it
is the textbook loop or formula it must equal. Shapes: ``x`` is ``(..., D)`` for norms and
``(B, T, H, hd)`` for RoPE, positions ``(B, T)``.
"""

from __future__ import annotations

import numpy as np


# ---- RMSNorm ---------------------------------------------------------------------------------
def rms_norm_naive(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx].astype(np.float64)
        out[idx] = row / np.sqrt((row * row).mean() + eps) * weight
    return out


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) * weight, in float32 as HF computes it."""
    ms = np.einsum("...d,...d->...", x, x)[..., None] / np.float32(x.shape[-1])  # (..., 1)
    return np.asarray(x * (1.0 / np.sqrt(ms + np.float32(eps))) * weight)


# ---- RoPE --------------------------------------------------------------------------------------
def rope_at(pos: np.ndarray, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of shape (len(pos), head_dim // 2) at positions ``pos``: angle = pos * base^(-2i / head_dim),
    in float64, stored float32. Computed per call rather than tabled for the whole context (a
    table for SmolLM2's 8192 positions is 2 MiB held for the process's life; a decode step needs
    B rows of it, microseconds to compute)."""
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))  # (hd/2,)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope_tables(max_pos: int, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of shape (max_pos, head_dim // 2): ``rope_at`` for positions 0..max_pos-1."""
    return rope_at(np.arange(max_pos), head_dim, base)


def rope_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the first half of each head against the second (HF's ``rotate_half`` layout).

    x: (B, T, H, hd); cos/sin: (B, T, hd/2) already gathered at each token's position.
    """
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def rope_pairs_naive(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """ggml's llama RoPE on the file's (permuted) layout: rotate adjacent pairs (2i, 2i+1).

    The reference used to check that un-permuting Q/K then ``rope_half`` is the same model.
    x: (T, H, hd); positions: (T,).
    """
    out = x.astype(np.float64).copy()
    hd = x.shape[-1]
    for t, p in enumerate(positions):
        for i in range(hd // 2):
            theta = p * base ** (-2.0 * i / hd)
            c, s = np.cos(theta), np.sin(theta)
            x0, x1 = x[t, :, 2 * i].astype(np.float64), x[t, :, 2 * i + 1].astype(np.float64)
            out[t, :, 2 * i] = x0 * c - x1 * s
            out[t, :, 2 * i + 1] = x0 * s + x1 * c
    return out.astype(np.float32)


# ---- SwiGLU --------------------------------------------------------------------------------------
def swiglu_naive(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = gate.astype(np.float64)
    return np.asarray(g / (1.0 + np.exp(-g)) * up, dtype=np.float32)


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up; exp of -gate may overflow to inf for very negative gate, giving 0 as it should."""
    with np.errstate(over="ignore"):
        return np.asarray(gate / (np.float32(1.0) + np.exp(-gate)) * up)


# ---- softmax with a boolean mask -------------------------------------------------------------------
def masked_softmax_naive(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    s = np.where(allowed, scores.astype(np.float64), -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True), dtype=np.float32)


def masked_softmax_(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """In place over the last axis; ``allowed`` broadcasts to ``scores``. Every row must allow one key."""
    np.copyto(scores, np.float32(-np.inf), where=~allowed)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores
