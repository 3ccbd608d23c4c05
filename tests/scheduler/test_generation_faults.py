"""Fault isolation in the generation scheduler: a fault in one sequence (its admission, its
sampling) finishes that sequence alone with "error" while its batch-mates finish exactly as they
would alone; a fault in the shared forward finishes the rows that forward carried, each with a
complete "error" finish at once; and the scheduler keeps serving afterwards. Every submitted
sequence gets exactly one FinishEvent (no client ever waits for an answer that cannot come)."""

from __future__ import annotations

import time

import numpy as np

from openhood.generate.generator import GenerationConfig, sample_next
from openhood.generate.sampling import SamplingParams
from openhood.scheduler.generation import FinishEvent, GenerationScheduler
from openhood.scheduler.policy import GenerationPolicy

from .test_generation import EOS, MODEL, Collector, Letters, SlowCollector, reference

GREEDY = SamplingParams(temperature=0.0)
POISON = 7  # max_tokens of the sequences the planted faults pick


class Boom(RuntimeError):
    pass


def sampler_failing_for_poison(row, config, rng):
    if config.max_tokens == POISON:
        raise Boom("planted sampling fault")
    return sample_next(row, config, rng)


class DecoderFailingOn:
    """The tiny model, except that a forward carrying ``token`` raises (after writing nothing)."""

    def __init__(self, token: int):
        self.token = token
        self.calls = 0

    def new_cache(self, n_slots, max_len):
        return MODEL.new_cache(n_slots, max_len)

    def forward(self, tokens, slots, cache, laps=None):
        self.calls += 1
        if any((row == self.token).any() for row in tokens):
            raise Boom("planted forward fault")
        return MODEL.forward(tokens, slots, cache)


def make(decoder=MODEL, sampler=sample_next, new_decoder=Letters, **policy) -> GenerationScheduler:
    return GenerationScheduler(
        decoder,
        GenerationPolicy(**{"max_running": 4, "prefill_chunk": 64, "max_context": 64, **policy}),
        eos_ids=frozenset({EOS}),
        new_decoder=new_decoder,
        context_length=128,
        sampler=sampler,
    )


def finishes(sinks: list[Collector]) -> list[FinishEvent]:
    out = [k.finish for k in sinks]
    for k in sinks:  # exactly one finish per sequence, and it is the last event
        assert sum(isinstance(e, FinishEvent) for e in k.events) == 1
    return out


def test_a_sampling_fault_fails_its_sequence_alone_and_the_batch_goes_on():
    s = make(sampler=sampler_failing_for_poison)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    configs = [GenerationConfig(max_tokens=m, sampling=GREEDY) for m in (9, POISON, 8, 6)]
    sinks = [Collector() for _ in prompts]
    for p, c, k in zip(prompts, configs, sinks, strict=True):
        s.submit(p, c, k)
    s.start()
    fins = finishes(sinks)
    assert fins[1].finish_reason == "error" and sinks[1].text == ""
    for i in (0, 2, 3):  # batch-mates: exactly what they would get alone
        text, reason, n = reference(prompts[i], configs[i])
        assert (sinks[i].text, fins[i].finish_reason, fins[i].completion_tokens) == (text, reason, n)
    assert s.sequence_faults == 1 and s.forward_faults == 0
    after = Collector()  # the scheduler still serves, and the failed slot was freed
    s.submit([1, 2], GenerationConfig(max_tokens=4, sampling=GREEDY), after)
    assert after.finish.finish_reason == "length"
    assert s.stop(10)
    assert s.n_running == 0 and s.kv_bytes_used == 0 and s.kv.reserved_tokens == 0


def test_a_fault_while_admitting_one_sequence_fails_it_alone():
    made = []

    def new_decoder():  # the second sequence admitted cannot get its per-sequence state
        made.append(1)
        if len(made) == 2:
            raise Boom("planted admission fault")
        return Letters()

    s = make(new_decoder=new_decoder)
    sinks = [Collector() for _ in range(3)]
    config = GenerationConfig(max_tokens=5, sampling=GREEDY)
    for p, k in zip(([1, 2], [3, 4], [5, 6]), sinks, strict=True):
        s.submit(p, config, k)
    s.start()
    fins = finishes(sinks)
    assert [f.finish_reason for f in fins] == ["length", "error", "length"]
    assert fins[1].admitted_ns and fins[1].completion_tokens == 0
    assert sinks[0].text == reference([1, 2], config)[0]
    assert s.stop(10)
    assert s.kv.free_slots == [0, 1, 2, 3] and s.kv.reserved_tokens == 0


def test_a_forward_fault_fails_the_rows_it_carried_at_once_and_the_scheduler_serves_on():
    poison_token = 33
    decoder = DecoderFailingOn(poison_token)
    s = make(decoder=decoder)
    config = GenerationConfig(max_tokens=30, sampling=GREEDY)
    running = [SlowCollector(0.02) for _ in range(2)]  # 30 tokens take >= 0.6 s: still running below
    for p, k in zip(([1, 2, 3], [4, 5, 6]), running, strict=True):
        s.submit(p, config, k)
    s.start()
    while not all(k.events for k in running):  # both decode before the poisoned prompt arrives
        time.sleep(0.001)
    poisoned = Collector()
    s.submit([8, poison_token, 9], config, poisoned)
    fins = finishes([*running, poisoned])
    # The poisoned prompt's chunk shared a forward with both decode rows: all three fail together,
    # each with one complete finish (the running ones keep what they had streamed).
    assert [f.finish_reason for f in fins] == ["error"] * 3
    assert all(0 < f.completion_tokens < 30 for f in fins[:2]) and fins[2].completion_tokens == 0
    assert s.forward_faults == 1
    after = Collector()
    s.submit([1, 2, 3], config, after)
    text, reason, n = reference([1, 2, 3], config)
    fin = after.finish  # wait for it before reading its text
    assert (after.text, fin.finish_reason, fin.completion_tokens) == (text, reason, n)
    assert s.stop(10)
    assert s.kv.free_slots == [0, 1, 2, 3] and s.kv.reserved_tokens == 0


def test_a_forward_fault_spares_sequences_it_did_not_carry():
    poison_token = 33
    s = make(decoder=DecoderFailingOn(poison_token), prefill_chunk=4)
    config = GenerationConfig(max_tokens=6, sampling=GREEDY)
    poisoned, reading = Collector(), Collector()
    # Oldest first with a 4-token chunk: the poisoned 3-token prompt and 1 token of the long one
    # share the first forward; the long prompt's other tokens were never in it.
    long_prompt = list(range(1, 21))
    s.submit([8, poison_token, 9], config, poisoned)
    s.submit(long_prompt, config, reading)
    s.start()
    assert poisoned.finish.finish_reason == "error"
    assert reading.finish.finish_reason == "error"  # its first chunk rode in the failed forward
    s2 = make(decoder=DecoderFailingOn(poison_token), prefill_chunk=3)
    spared = Collector()
    s2.submit([8, poison_token, 9], config, poisoned2 := Collector())
    s2.submit([1, 2, 3], config, spared)
    s2.start()
    assert poisoned2.finish.finish_reason == "error"
    text, reason, n = reference([1, 2, 3], config)  # waited for the next forward: untouched
    fin = spared.finish  # wait for it before reading its text
    assert (spared.text, fin.finish_reason, fin.completion_tokens) == (text, reason, n)
    assert s.stop(10) and s2.stop(10)


def test_a_negative_seed_cannot_reach_the_scheduler():
    # The route refuses it with a 422; SamplingParams refuses it too, so no path builds one.
    try:
        SamplingParams(temperature=1.0, seed=-1)
    except ValueError as exc:
        assert "seed" in str(exc)
    else:
        raise AssertionError("a negative seed was accepted")
    assert np.random.default_rng(2**64 - 1) is not None  # the route's upper bound is a valid seed


def test_the_kv_cache_manager_owns_slots_reservations_and_prefixes():
    # schedule → execute → update: the manager alone hands out and takes back slots.
    s = make(max_running=2)
    kv = s.kv
    assert kv.free_slots == [0, 1] and kv.reserved_tokens == 0
    assert kv.fits(10) and not kv.fits(kv.budget_tokens + 1)
    choice = kv.allocate([1, 2, 3], 10, running={})
    assert choice.slot == 0 and kv.free_slots == [1] and kv.reserved_tokens == 10
    kv.prepare(choice)
    assert kv.length(0) == 0
    kv.free(0, 10, held=[1, 2, 3])
    assert kv.free_slots == [0, 1] and kv.reserved_tokens == 0
    again = kv.allocate([1, 2, 3, 4], 5, running={})  # the freed slot still holds [1, 2, 3]
    assert (again.slot, again.reused) == (0, 3)
