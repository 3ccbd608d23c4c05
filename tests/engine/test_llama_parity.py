"""Parity with Hugging Face transformers loading the same GGUF (fixtures: scripts/make_llama_fixtures.py):
logits within 1e-3, greedy continuations identical up to the reference's first near-tie."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.llama_parity import compare_greedy  # benchmark tooling: the repository root is on sys.path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGIT_TOL = 1e-3  # the bound for dequantized float32 weights
GREEDY_STEPS = 6  # reduced for `make test`; benchmarks/decoder.py --parity runs all 64


@pytest.fixture(scope="module")
def ref_logits():
    with np.load(FIXTURES / "llama_logits.npz", allow_pickle=False) as z:
        return dict(z)


@pytest.mark.parametrize("i", [0, 1])
def test_logits_match_transformers_at_every_prompt_position(smollm2, ref_logits, i):
    ids = ref_logits[f"ids_{i}"]
    full = smollm2.forward_full(ids)  # (T, V)
    assert np.abs(full[:, ref_logits["vocab_slice"]] - ref_logits[f"slice_{i}"]).max() <= LOGIT_TOL
    top_ids = ref_logits[f"top_ids_{i}"]
    assert np.abs(np.take_along_axis(full, top_ids, axis=1) - ref_logits[f"top_vals_{i}"]).max() <= LOGIT_TOL
    assert (full.argmax(axis=1) == top_ids[:, 0]).all()
    cache = smollm2.new_cache(1, len(ids))
    cached = smollm2.forward([ids], [0], cache)[0]
    assert np.abs(cached[top_ids[-1]] - ref_logits[f"top_vals_{i}"][-1]).max() <= LOGIT_TOL


def test_greedy_continuations_match_transformers(smollm2):
    cases = json.loads((FIXTURES / "llama_greedy.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) == 20
    report = compare_greedy(smollm2, cases, GREEDY_STEPS, tolerance=LOGIT_TOL)
    bad = [r for r in report if not r.ok]
    assert not bad, bad
