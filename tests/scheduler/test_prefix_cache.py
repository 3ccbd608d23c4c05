"""Prefix caching in the generation scheduler: greedy outputs are identical with the cache on and
off, a shared prompt prefix is computed once (from a finished sequence's slot, or copied from a
running one), a conversation replayed turn by turn computes little more than its new tokens, and
the counters (hits, cached tokens, evictions) say so."""

from __future__ import annotations

import numpy as np

from openhood.generate.generator import GenerationConfig
from openhood.generate.sampling import SamplingParams
from openhood.scheduler.generation import GenerationScheduler
from openhood.scheduler.policy import GenerationPolicy
from openhood.scheduler.prefix_cache import common_prefix

from .test_generation import EOS, MODEL, Collector, Letters, reference

GREEDY = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.0))
SYSTEM = [int(t) for t in np.random.default_rng(1).integers(1, 60, 40)]  # a shared "system prompt"


def make(prefix_cache: bool, max_running: int = 2) -> GenerationScheduler:
    s = GenerationScheduler(
        MODEL,
        GenerationPolicy(max_running=max_running, prefill_chunk=64, max_context=120, prefix_cache=prefix_cache),
        eos_ids=frozenset({EOS}),
        new_decoder=Letters,
        context_length=128,
    )
    s.start()
    return s


def run_one(s: GenerationScheduler, prompt: list[int], config: GenerationConfig = GREEDY) -> str:
    k = Collector()
    s.submit(prompt, config, k)
    k.finish  # noqa: B018 -- waits for the finish
    return "".join(e.text for e in k.events)


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([7, 8], [7, 8, 9]) == 2


def test_greedy_is_identical_with_the_cache_on_and_off_and_the_shared_prefix_is_computed_once():
    prompts = [[*SYSTEM, 5, 6, 7], [*SYSTEM, 8, 9], [*SYSTEM, 5, 6, 7], [*SYSTEM[:20], 3]]
    outputs, computed = {}, {}
    for on in (False, True):
        s = make(on)
        try:
            outputs[on] = [run_one(s, p) for p in prompts]
            computed[on] = s.prefill_computed
            hits, cached = s.prefix.hits, s.prefix.cached_tokens
        finally:
            s.stop(10)
    assert outputs[True] == outputs[False] == [reference(p, GREEDY)[0] for p in prompts]
    assert computed[False] == sum(len(p) for p in prompts)
    # 2nd: the system prompt, in place (that slot now holds the 2nd's tokens); 3rd: the system prompt
    # again from there; 4th: its first 20 tokens
    assert (hits, cached) == (3, 40 + 40 + 20)
    assert computed[True] == computed[False] - cached


def test_a_running_sequences_prefix_is_copied_into_a_new_slot():
    s = make(True)
    try:
        long_run = GenerationConfig(max_tokens=60, sampling=SamplingParams(temperature=0.0))
        first = Collector()
        s.submit([*SYSTEM, 1], long_run, first)
        while not first.events:  # the first is decoding: its prompt is in its slot
            first.done.wait(0.01)
        text = run_one(s, [*SYSTEM, 2, 3])
        assert s.prefix.hits == 1 and s.prefix.cached_tokens == len(SYSTEM)
        assert text == reference([*SYSTEM, 2, 3], GREEDY)[0]
        first.finish  # noqa: B018
    finally:
        s.stop(10)


def test_a_conversation_replayed_turn_by_turn_computes_little_more_than_its_new_tokens():
    s = make(True, max_running=1)
    rng = np.random.default_rng(3)
    history: list[int] = list(SYSTEM)
    new_tokens = 0
    try:
        for _ in range(10):
            user = [int(t) for t in rng.integers(1, 60, 4)]
            history += user
            k = Collector()
            s.submit(list(history), GenerationConfig(max_tokens=3, sampling=SamplingParams(temperature=0.0)), k)
            k.finish  # noqa: B018
            answer = [int(t) for t in rng.integers(1, 60, 3)]  # the client's version of the answer
            new_tokens += len(user) + (len(SYSTEM) if len(history) == len(SYSTEM) + 4 else 0)
            history += answer
            new_tokens += len(answer)
        assert s.prefill_computed <= 1.2 * new_tokens
    finally:
        s.stop(10)


def test_lru_eviction_is_counted():
    s = make(True, max_running=1)
    try:
        run_one(s, [*SYSTEM, 1])
        run_one(s, [9, 9, 9, 9])  # nothing in common: the one slot's held prefix is evicted
        assert s.prefix.evictions == 1 and s.prefix.hits == 0
    finally:
        s.stop(10)
