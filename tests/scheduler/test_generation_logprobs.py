"""The scheduler's per-token logprobs equal a float64 log-softmax of the uncached reference model's
logits at every position, for a sequence that asked (its batch-mate, which did not, gets none)."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.generate.generator import GenerationConfig, SequenceState
from openhood.generate.sampling import SamplingParams, sample
from openhood.scheduler.generation import FinishEvent, GenerationScheduler, TokenEvent
from openhood.scheduler.policy import GenerationPolicy

from .test_generation import EOS, MODEL, Collector, Letters


def test_the_scheduler_reports_each_tokens_logprobs_from_the_models_logits():
    s = GenerationScheduler(
        MODEL,
        GenerationPolicy(max_running=4, prefill_chunk=64, max_context=64),
        eos_ids=frozenset({EOS}),
        new_decoder=Letters,
        context_length=128,
    )
    sampled = SamplingParams(temperature=0.9, seed=5, logit_bias=((3, 2.0),))  # reported values ignore the bias
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    configs = [
        GenerationConfig(max_tokens=9, sampling=sampled, logprobs=4),
        GenerationConfig(max_tokens=9, sampling=sampled),
    ]
    sinks = [Collector() for _ in prompts]
    for p, c, k in zip(prompts, configs, sinks, strict=True):
        s.submit(p, c, k)
    s.start()
    try:
        for k in sinks:
            assert isinstance(k.finish, FinishEvent)
    finally:
        s.stop(10)
    asked = [lp for e in sinks[0].events for lp in e.logprobs]
    assert not any(e.logprobs for e in sinks[1].events)  # nobody asked: nothing computed
    # the reference: one sequence alone through the uncached forward, float64 log-softmax per position
    state, seq, want = SequenceState(0, prompts[0], configs[0], Letters()), list(prompts[0]), []
    while state.finish_reason is None:
        logits = MODEL.forward_full(seq)[-1].astype(np.float64)
        token = sample(MODEL.forward_full(seq)[-1], sampled, state.rng)
        logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
        if token != EOS:
            want.append((token, logp[token], np.argsort(-logp, kind="stable")[:4], logp))
        state.accept(token, frozenset({EOS}))
        seq.append(token)
    assert [e.token for e in asked] == [w[0] for w in want]
    for e, (_, lp, top, logp) in zip(asked, want, strict=True):
        assert e.logprob == pytest.approx(lp, abs=1e-5)  # the cached forward vs the textbook one: float32 noise
        assert [t for t, _ in e.top] == list(top)
        np.testing.assert_allclose([v for _, v in e.top], logp[top], atol=1e-5)
    assert sum(isinstance(e, TokenEvent) for e in sinks[0].events) + 1 == len(sinks[0].events)
