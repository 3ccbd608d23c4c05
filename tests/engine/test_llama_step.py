"""The one-call batch-1 decode step (engine/models/llama_step) against the general path it replaces.

Both paths run the same kernels (the SIMD gemv from the avx2 level on, numba's below: this file
is re-run at every level by tests/engine/test_isa.py), so they may differ by float32 summation
order only: logits within 1e-4 of each other, the same cache contents, the same greedy tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.models.llama import Llama

PROMPT = np.array([1, 4093, 198, 19556, 905, 17, 216, 33, 34, 2000, 30, 7])


@pytest.fixture(scope="module")
def quantized(smollm2_path):
    return Llama.from_gguf(smollm2_path, weights="quantized")


def _decode(model: Llama, fused: bool, steps: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Greedy tokens, every step's logits (steps, V) and the slot's cache after ``steps`` steps."""
    model.fused_decode = fused
    try:
        cache = model.new_cache(2, 64)
        model.forward([PROMPT], [1], cache)  # slot 1: the step must write the slot it is given
        token, tokens, logits = int(PROMPT[-1]), [], []
        for _ in range(steps):
            out = model.forward([np.array([token])], [1], cache)
            logits.append(out[0])
            token = int(out[0].argmax())
            tokens.append(token)
        n = int(cache.lengths[1])
        assert n == len(PROMPT) + steps and cache.lengths[0] == 0
        return tokens, np.array(logits), np.stack([cache.k[:, 1, :, :n], cache.v[:, 1, :, :n]])
    finally:
        model.fused_decode = True


def test_fused_step_equals_the_general_path(quantized):
    assert quantized.stacks is not None  # SmolLM2's layers are all Q4_1: the fused path is taken
    general = _decode(quantized, fused=False, steps=24)
    fused = _decode(quantized, fused=True, steps=24)
    assert fused[0] == general[0]
    assert np.abs(fused[1] - general[1]).max() <= 1e-4  # measured ~4e-5: summation order
    np.testing.assert_allclose(fused[2], general[2], rtol=1e-4, atol=1e-4)  # measured ≤ 1.7e-5


def test_fused_step_matches_float32_weights(quantized, smollm2):
    """The same dequantized weights as float32 arrays and BLAS: the quantized decoder's bound."""
    ours, ref = _decode(quantized, fused=True, steps=8), _decode(smollm2, fused=True, steps=8)
    assert smollm2.stacks is None  # float32 weights never take the fused path
    assert ours[0] == ref[0]
    assert np.abs(ours[1] - ref[1]).max() <= 1e-3


def test_stacked_layers_are_views_not_a_second_copy(quantized):
    s = quantized.stacks
    assert s is not None
    for i, layer in enumerate(quantized.layers):
        for role in ("wqkv", "wo", "w_gate_up", "w_down"):
            w, stack = getattr(layer, role), getattr(s, role)
            assert np.shares_memory(w.q, stack.q[i]) and np.shares_memory(w.d, stack.d[i])
    assert quantized.weight_bytes == quantized.layer_bytes + quantized.embed.nbytes + quantized.out_norm.nbytes


def test_batched_decode_and_prompts_keep_the_general_path(quantized):
    """Two sequences stepping together equal each stepping alone (the fused path for one row)."""
    cache = quantized.new_cache(2, 64)
    quantized.forward([PROMPT, PROMPT[:5]], [0, 1], cache)
    both = quantized.forward([np.array([11]), np.array([12])], [0, 1], cache)
    alone = quantized.new_cache(2, 64)
    quantized.forward([PROMPT], [0], alone)
    quantized.forward([PROMPT[:5]], [1], alone)
    one = quantized.forward([np.array([11])], [0], alone)
    two = quantized.forward([np.array([12])], [1], alone)
    assert np.abs(both[0] - one[0]).max() <= 1e-3 and np.abs(both[1] - two[0]).max() <= 1e-3
