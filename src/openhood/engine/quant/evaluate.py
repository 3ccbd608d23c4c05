"""Score quantized embeddings against fp32 ones.

Quality is measured on the model's *output* — the pooled, normalized sentence embedding — not
per-layer tensors, because that is what users see: per-text cosine vs fp32 (mean and worst
case) and top-k nearest-neighbour agreement on a retrieval task built from the same texts
(each text queries the others; agreement = |top-k under fp32 ∩ top-k under int8| / k).

Running the ONNX graphs that produce them is ``openhood.backends.ort_session``'s job (the
engine knows no runtime).
"""

from __future__ import annotations

import numpy as np


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of (N, D) arrays → (N,)."""
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos: np.ndarray = num / np.maximum(den, 1e-12)
    return cos


def topk_neighbours(x: np.ndarray, k: int) -> np.ndarray:
    """Indices (N, k) of each row's k most similar other rows (cosine; self excluded)."""
    xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sims = xn @ xn.T  # (N, N)
    np.fill_diagonal(sims, -np.inf)
    k = min(k, len(x) - 1)
    part = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # unordered top k: only set overlap matters
    return part


def topk_agreement(ref: np.ndarray, test: np.ndarray, k: int = 10) -> float:
    """Mean fraction of each row's top-k neighbours under ``ref`` also found under ``test``."""
    a, b = topk_neighbours(ref, k), topk_neighbours(test, k)
    hits = [len(np.intersect1d(ra, rb, assume_unique=True)) for ra, rb in zip(a, b, strict=True)]
    return float(np.mean(hits) / a.shape[1])


def topk_agreement_naive(ref: np.ndarray, test: np.ndarray, k: int = 10) -> float:
    """Reference for ``topk_agreement``: full sort per row in plain Python."""

    def top(x: np.ndarray, i: int) -> set[int]:
        sims = [
            (float(np.dot(x[i], x[j]) / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))), j)
            for j in range(len(x))
            if j != i
        ]
        return {j for _, j in sorted(sims, reverse=True)[:k]}

    return float(np.mean([len(top(ref, i) & top(test, i)) / min(k, len(ref) - 1) for i in range(len(ref))]))


def quality(ref: np.ndarray, test: np.ndarray, k: int = 10) -> dict[str, float]:
    """``{"cos_mean", "cos_min", "top10"}`` of ``test`` embeddings against ``ref``."""
    cos = cosine_rows(ref, test)
    return {"cos_mean": float(cos.mean()), "cos_min": float(cos.min()), f"top{k}": topk_agreement(ref, test, k)}
