"""Next-token choice: the ``generate`` task's postprocessor (logits in, token ids out).

Order as in Hugging Face's samplers: ``logit_bias`` is added to the logits (OpenAI's per-token
bias, greedy included), temperature scales them, top-k keeps the k largest,
top-p keeps the smallest set whose probability reaches p, then one draw. Temperature 0 is
greedy (argmax, no randomness). Each sequence owns its ``numpy.random.Generator`` so its
tokens depend on its own seed only, never on which other sequences share the batch.
The trade-off: a full sort of the vocabulary (49k) per sampled token when top-p is on, which
is ~1 ms, small beside a decode step; ``argpartition`` serves top-k alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0 (0 = greedy)")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.seed is not None and self.seed < 0:
            raise ValueError("seed must be >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


def filtered_probs(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Probabilities (V,) after temperature, top-k and top-p; zero outside the kept set."""
    x = logits.astype(np.float64) / p.temperature
    keep = np.ones(x.shape, dtype=bool)
    if p.top_k and p.top_k < x.size:
        kth = np.partition(x, -p.top_k)[-p.top_k]
        keep &= x >= kth
    x = np.where(keep, x, -np.inf)
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    if p.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        n_keep = int(np.searchsorted(cum, p.top_p)) + 1  # smallest prefix reaching top_p
        cut = np.zeros_like(keep)
        cut[order[:n_keep]] = True
        probs = np.where(cut, probs, 0.0)
        probs /= probs.sum()
    return probs


def sample(logits: np.ndarray, p: SamplingParams, rng: np.random.Generator) -> int:
    """One token id from one row of logits (V,)."""
    if p.logit_bias:
        ids, bias = zip(*p.logit_bias, strict=True)
        logits = logits.astype(np.float32, copy=True)
        np.add.at(logits, np.asarray(ids, dtype=np.int64), np.asarray(bias, dtype=np.float32))
    if p.greedy:
        return int(np.argmax(logits))
    probs = filtered_probs(logits, p)
    return int(rng.choice(probs.size, p=probs))
