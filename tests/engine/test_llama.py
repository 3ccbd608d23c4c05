"""The Llama decoder: ops vs naive references, the Q/K permutation vs ggml's pairwise RoPE,
cached batched forward vs the uncached reference at every step, rows independent of each other
(packed prompts and decode rows in one call), the attention grouping."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.models.kv_cache import KVCacheFullError
from openhood.engine.models.llama import attention_groups
from openhood.engine.models.llama_ops import (
    masked_softmax_,
    masked_softmax_naive,
    rms_norm,
    rms_norm_naive,
    rope_at,
    rope_half,
    rope_pairs_naive,
    rope_tables,
    swiglu,
    swiglu_naive,
)
from openhood.formats.gguf import permute_qk

rng = np.random.default_rng(0)
TOL = 2e-4  # float32 logits of magnitude ~20: summation order differs between the two paths


def test_elementwise_ops_match_naive():
    x = rng.standard_normal((2, 3, 16), dtype=np.float32)
    w = rng.standard_normal(16, dtype=np.float32)
    np.testing.assert_allclose(rms_norm(x, w, 1e-5), rms_norm_naive(x, w, 1e-5), rtol=1e-5, atol=1e-6)
    g = rng.standard_normal((4, 8), dtype=np.float32) * 30
    np.testing.assert_allclose(swiglu(g, g), swiglu_naive(g, g), rtol=1e-5, atol=1e-5)
    s = rng.standard_normal((2, 5, 7), dtype=np.float32)
    allowed = np.tril(np.ones((5, 7), dtype=bool), k=2)[None]
    np.testing.assert_allclose(masked_softmax_(s.copy(), allowed), masked_softmax_naive(s, allowed), atol=1e-6)


def test_half_rope_on_unpermuted_rows_equals_ggml_pair_rope_on_file_rows():
    """Why we may un-permute Q/K: the file's row order + pairwise RoPE is the same map as HF's
    row order + half-split RoPE, up to that same permutation of the output."""
    T, H, hd, base = 6, 3, 8, 100000.0
    x_hf = rng.standard_normal((T, H, hd), dtype=np.float32)
    # the converter permutes each head's rows; apply it to the feature axis of activations
    x_file = permute_qk(x_hf.transpose(1, 2, 0).reshape(H * hd, T), H).reshape(H, hd, T).transpose(2, 0, 1)
    positions = np.arange(3, 3 + T)
    cos, sin = rope_tables(16, hd, base)
    ours = rope_half(x_hf[None], cos[positions][None], sin[positions][None])[0]
    ours_in_file_order = permute_qk(ours.transpose(1, 2, 0).reshape(H * hd, T), H).reshape(H, hd, T).transpose(2, 0, 1)
    np.testing.assert_allclose(ours_in_file_order, rope_pairs_naive(x_file, positions, base), atol=1e-5)


def test_cached_decode_equals_full_recomputation_at_every_step(smollm2, smollm2_tok):
    m = smollm2
    ids = smollm2_tok.encode("<|im_start|>user\nName a colour.<|im_end|>\n").tolist()
    cache = m.new_cache(1, 64)
    seq = list(ids)
    step_logits = [m.forward([np.array(ids)], [0], cache)[0]]
    for _ in range(4):
        nxt = int(step_logits[-1].argmax())
        seq.append(nxt)
        step_logits.append(m.forward([np.array([nxt])], [0], cache)[0])
    full = m.forward_full(seq)  # (T, V)
    for i, lg in enumerate(step_logits):
        np.testing.assert_allclose(lg, full[len(ids) - 1 + i], atol=TOL)
    assert cache.lengths[0] == len(seq)


def test_batch_of_different_lengths_equals_one_by_one(smollm2):
    m = smollm2
    prompts = [np.array([1, 9707, 28, 905]), np.array([1, 504, 3458, 314, 1848, 30, 216, 33]), np.array([1, 57, 31])]
    cache = m.new_cache(4, 32)
    batched = m.forward(prompts, [3, 0, 1], cache)  # slots in any order
    step = m.forward([np.array([11]), np.array([22]), np.array([33])], [3, 0, 1], cache)  # rows at positions 4, 8, 3
    for b, p in enumerate(prompts):
        solo = m.new_cache(1, 32)
        np.testing.assert_allclose(batched[b], m.forward([p], [0], solo)[0], atol=TOL)
        np.testing.assert_allclose(step[b], m.forward([np.array([11 * (b + 1)])], [0], solo)[0], atol=TOL)


def test_decode_rows_and_prompt_chunks_in_one_call_equal_one_by_one(smollm2):
    """What a continuous-batching step sends: decode rows at different positions beside prompt
    chunks (two of the same length, one continuing a prompt already half in the cache)."""
    m = smollm2
    first = [np.array([1, 9707, 28, 905, 17]), np.array([1, 57]), np.array([1, 504, 3458]), np.array([1, 33, 44])]
    cache = m.new_cache(4, 32)
    m.forward(first, [0, 1, 2, 3], cache)
    mixed = [np.array([11]), np.array([5, 6, 7]), np.array([22]), np.array([8, 9, 10])]
    got = m.forward(mixed, [0, 1, 2, 3], cache)  # rows at 5, 2..4, 3, 3..5 new positions
    for b in range(4):
        solo = m.new_cache(1, 32)
        want = m.forward([np.concatenate([first[b], mixed[b]])], [0], solo)[0]
        np.testing.assert_allclose(got[b], want, atol=TOL)
    assert cache.lengths.tolist() == [6, 5, 4, 6]


def test_attention_groups_split_rows_by_new_tokens_and_mask_causally():
    slots, start = np.array([4, 0, 2]), np.array([7, 0, 3])
    n_new = np.array([1, 3, 1])
    offsets = np.cumsum(n_new) - n_new  # [0, 1, 4]
    decode, prompt = attention_groups(slots, start, n_new, offsets)
    assert decode.slots.tolist() == [4, 2] and decode.index.tolist() == [[0], [4]] and decode.keys == 8
    assert decode.allowed[:, 0, 0, 0].sum(axis=1).tolist() == [8, 4]  # row 2 sees only its 4 keys
    assert prompt.slots.tolist() == [0] and prompt.index.tolist() == [[1, 2, 3]] and prompt.keys == 3
    assert np.array_equal(prompt.allowed[0, 0, 0], np.tril(np.ones((3, 3), dtype=bool)))


def test_cache_full_and_slot_reuse(smollm2):
    m = smollm2
    cache = m.new_cache(1, 4)
    first = m.forward([np.array([1, 2, 3])], [0], cache)
    with pytest.raises(KVCacheFullError):
        m.forward([np.array([4, 5])], [0], cache)
    cache.reset(0)
    np.testing.assert_allclose(m.forward([np.array([1, 2, 3])], [0], cache), first, atol=1e-6)
    with pytest.raises(ValueError, match="at least one"):
        m.forward([np.array([], dtype=np.int64)], [0], cache)


def test_first_decode_step_calls_the_warm_up_hook_once():
    """The step loop's kernels are compiled by the first decode step; then, once, the model calls
    its ``after_warm_up`` hook (where ``generate.Generator`` gives back the JIT compiler's pages)."""
    from tests.scheduler.test_generation import tiny_llama

    model = tiny_llama(seed=3)
    calls: list[int] = []
    model.after_warm_up = lambda: calls.append(1)
    cache = model.new_cache(2, 16)
    logits = model.forward([np.array([1, 2, 3]), np.array([4, 5])], [0, 1], cache)  # prefill
    assert not model._warm and calls == []
    for _ in range(2):  # decode twice: the hook runs after the first step only
        logits = model.forward([np.array([int(t)]) for t in logits.argmax(axis=1)], [0, 1], cache)
    assert model._warm and calls == [1]


def test_rope_at_positions_equals_the_table_rows():
    cos, sin = rope_tables(300, 64, 100000.0)
    pos = np.array([0, 7, 299, 7, 128])
    c, s = rope_at(pos, 64, 100000.0)
    np.testing.assert_array_equal(c, cos[pos])
    np.testing.assert_array_equal(s, sin[pos])
