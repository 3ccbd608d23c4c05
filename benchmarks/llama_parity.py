"""Greedy-continuation parity against a reference's recorded tokens, tie-aware.

Two correct float32 implementations may pick different argmaxes where the reference's top two
logits are closer than their numeric difference; after such a step the continuations may part
legitimately. ``compare_greedy`` runs all prompts as one batch (each in its own KV-cache slot)
and reports, per prompt, the first mismatch and whether it is excused by a near-tie.
Used by the parity test (reduced) and ``benchmarks/decoder.py --parity`` (all 64 steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class GreedyComparison:
    prompt: str
    steps: int
    first_mismatch: int | None  # step index, None if identical for all steps
    first_near_tie: int | None  # first step whose reference top-2 gap < tolerance
    ok: bool  # identical, or the first mismatch is at/after the first near-tie


def greedy_tokens(model: Any, prompts: list[list[int]], steps: int) -> list[list[int]]:
    """``steps`` argmax tokens per prompt, never stopping at EOS (as the reference recorded them)."""
    cache = model.new_cache(len(prompts), max(map(len, prompts)) + steps)
    slots = list(range(len(prompts)))
    feed = [np.asarray(p, dtype=np.int64) for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for _ in range(steps):
        nxt = model.forward(feed, slots, cache).argmax(axis=1)
        for b, t in enumerate(nxt):
            out[b].append(int(t))
        feed = [np.array([t], dtype=np.int64) for t in nxt]
    return out


def compare_greedy(model: Any, cases: list[dict[str, Any]], steps: int, tolerance: float) -> list[GreedyComparison]:
    ours = greedy_tokens(model, [c["ids"] for c in cases], steps)
    report = []
    for c, got in zip(cases, ours, strict=False):
        ref = c["greedy"][:steps]
        mism = next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), None)
        tie = next((i for i, g in enumerate(c["top2_gap"][:steps]) if g < tolerance), None)
        ok = mism is None or (tie is not None and mism >= tie)
        report.append(GreedyComparison(c["prompt"], steps, mism, tie, ok))
    return report
