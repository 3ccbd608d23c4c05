"""The generation scheduler: continuous batching gives every sequence exactly what it would get
alone (the uncached reference model, one sequence at a time), and admission, limits,
cancellation and the drain cut behave as documented. A tiny random Llama keeps it fast; the
real SmolLM2 goes through the same scheduler in tests/server/test_completions.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from openhood.engine.models.llama import Llama, LlamaConfig
from openhood.engine.models.llama_weights import LayerWeights
from openhood.generate.generator import GenerationConfig, SequenceState
from openhood.generate.sampling import SamplingParams, sample
from openhood.scheduler import QueueFullError, SchedulerStoppedError
from openhood.scheduler.generation import FinishEvent, GenerationScheduler, TokenEvent
from openhood.scheduler.policy import GenerationPolicy

VOCAB, EOS = 64, 63


def tiny_llama(seed: int = 0) -> Llama:
    cfg = LlamaConfig(
        n_layers=2,
        dim=32,
        ffn_dim=64,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=VOCAB,
        context_length=128,
        rope_base=10000.0,
        norm_eps=1e-5,
    )
    rng = np.random.default_rng(seed)
    w = lambda *shape, s=0.2: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    kv = cfg.n_kv_heads * cfg.head_dim
    layers = [
        LayerWeights(
            np.ones(32, np.float32), w(32 + 2 * kv, 32), w(32, 32), np.ones(32, np.float32), w(128, 32), w(32, 64)
        )
        for _ in range(cfg.n_layers)
    ]
    return Llama(cfg, w(VOCAB, 32, s=1.0), layers, np.ones(32, np.float32))


class Letters:
    """A stream decoder for the tiny vocabulary: token i is one letter."""

    def push(self, token: int) -> str:
        return chr(ord("A") + token % 58)

    def flush(self) -> str:
        return ""


MODEL = tiny_llama()


def reference(prompt: list[int], config: GenerationConfig) -> tuple[str, str, int]:
    """One sequence alone, through the uncached textbook forward: (text, finish_reason, tokens)."""
    state = SequenceState(0, prompt, config, Letters())
    seq, text, n = list(prompt), "", 0
    while state.finish_reason is None:
        token = sample(MODEL.forward_full(seq)[-1], config.sampling, state.rng)
        text += state.accept(token, frozenset({EOS}))
        seq.append(token)
        n += 1
    return text, state.finish_reason, n


class Collector:
    """A sink per request: events arrive on the scheduler's thread."""

    def __init__(self) -> None:
        self.events: list[TokenEvent | FinishEvent] = []
        self.done = threading.Event()

    def __call__(self, event: TokenEvent | FinishEvent) -> None:
        self.events.append(event)
        if isinstance(event, FinishEvent):
            self.done.set()

    @property
    def finish(self) -> FinishEvent:
        assert self.done.wait(30), "the sequence did not finish"
        event = self.events[-1]
        assert isinstance(event, FinishEvent)
        return event

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)


class SlowCollector(Collector):
    """A sink that holds the scheduler's thread for ``delay`` seconds per token, so a sequence
    outlives whatever the test does between its tokens."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def __call__(self, event: TokenEvent | FinishEvent) -> None:
        if isinstance(event, TokenEvent):
            time.sleep(self.delay)
        super().__call__(event)


def scheduler(policy: GenerationPolicy, steps: list | None = None) -> GenerationScheduler:
    return GenerationScheduler(
        MODEL,
        policy,
        eos_ids=frozenset({EOS}),
        new_decoder=Letters,
        context_length=128,
        on_step=None if steps is None else steps.append,
    )


def test_continuous_batching_equals_each_sequence_alone():
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, EOS, n).tolist() for n in (3, 21, 7, 40, 2, 13)]
    configs = [
        GenerationConfig(max_tokens=m, sampling=s)
        for m, s in zip(
            (6, 9, 5, 7, 8, 6),
            (
                SamplingParams(temperature=0.0),
                SamplingParams(temperature=0.9, top_p=0.9, seed=3),
                SamplingParams(temperature=0.0),
                SamplingParams(temperature=1.2, seed=11),
                SamplingParams(temperature=0.7, top_k=5, seed=5),
                SamplingParams(temperature=0.0),
            ),
            strict=True,
        )
    ]
    steps: list = []
    # 3 slots for 6 sequences, prefill chunks of 8 tokens: sequences wait, join mid-flight, and the
    # 40-token prompt is spread over 5 steps while the others decode.
    s = scheduler(GenerationPolicy(max_running=3, prefill_chunk=8, max_context=64), steps)
    sinks = [Collector() for _ in prompts]
    for p, c, k in zip(prompts[:4], configs[:4], sinks[:4], strict=True):
        s.submit(p, c, k)
    s.start()
    while len(steps) < 3:
        time.sleep(0.001)
    for p, c, k in zip(prompts[4:], configs[4:], sinks[4:], strict=True):  # arrive while others run
        s.submit(p, c, k)
    for p, c, k in zip(prompts, configs, sinks, strict=True):
        text, reason, n = reference(p, c)
        fin = k.finish
        assert (k.text, fin.finish_reason, fin.completion_tokens) == (text, reason, n)
        assert fin.prompt_tokens == len(p) and not fin.cut
        tokens = [e.tokens for e in k.events if isinstance(e, TokenEvent)]
        assert tokens == list(range(1, len(tokens) + 1))  # one event per sampled token, in order
    assert s.stop(10)
    assert max(st.decode_rows for st in steps) == 3  # never more than the slots
    assert max(st.prefill_tokens for st in steps) <= 8
    assert any(st.decode_rows and st.prefill_rows for st in steps)  # a prompt joined a running batch
    assert s.n_running == 0 and s.kv_bytes_used == 0 and s.queue_depth == 0


class FixedBudget:
    """Stands in for StepBudget: 3 prompt tokens per step while anyone decodes, else 32."""

    def __init__(self) -> None:
        self.observed: list[tuple[int, float]] = []

    def prefill_tokens(self, decode_rows: int, running: int | None = None) -> int:
        assert running is not None and running >= decode_rows
        return 3 if decode_rows else 32

    def observe(self, tokens: int, seconds: float) -> None:
        self.observed.append((tokens, seconds))


def test_step_budget_sizes_the_prompt_chunk_beside_decode_rows():
    """One packed forward per step: decode rows plus at most the budget's prompt tokens; the
    budget sees every step's token count (decode rows + prompt tokens) and time."""
    steps: list = []
    s = scheduler(GenerationPolicy(max_running=2, prefill_chunk=32, max_context=64), steps)
    s.budget = FixedBudget()
    greedy = GenerationConfig(max_tokens=20, sampling=SamplingParams(temperature=0.0))
    long_prompt = list(range(1, 24))  # 23 tokens, read 3 at a time while the first decodes
    second = Collector()

    class SubmitsSecond(Collector):
        def __call__(self, event: TokenEvent | FinishEvent) -> None:
            if not self.events:  # on the worker thread, at the first token: joins at the next step
                s.submit(long_prompt, greedy, second)
            super().__call__(event)

    first = SubmitsSecond()
    s.submit([5, 6, 7], greedy, first)
    s.start()
    assert first.finish.completion_tokens == second.finish.completion_tokens == 20
    assert (first.text, second.text) == (reference([5, 6, 7], greedy)[0], reference(long_prompt, greedy)[0])
    assert s.stop(10)
    assert steps[0].decode_rows == 0 and steps[0].prefill_tokens == 3  # alone: the whole prompt
    beside = [st.prefill_tokens for st in steps if st.decode_rows and st.prefill_rows]
    assert beside == [3] * 7 + [2]  # 23 tokens over 8 steps, each beside the first's decode row
    assert [t for t, _ in s.budget.observed] == [st.decode_rows + st.prefill_tokens for st in steps]


def test_kv_budget_limits_the_running_batch_and_the_queue_limit_refuses():
    probe = scheduler(GenerationPolicy())
    per_token = probe.bytes_per_token
    # The budget holds one sequence of 4 + 6 positions: the others wait for it to leave.
    steps: list = []
    s = scheduler(GenerationPolicy(max_running=4, kv_cache_bytes=10 * per_token, max_waiting=2), steps)
    greedy = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.0))
    sinks = [Collector() for _ in range(3)]
    s.submit([1, 2, 3, 4], greedy, sinks[0])
    s.submit([5, 6, 7, 8], greedy, sinks[1])
    with pytest.raises(QueueFullError):
        s.submit([9, 10, 11, 12], greedy, sinks[2])  # 2 waiting already (not started)
    s.start()
    for k in sinks[:2]:
        assert k.finish.completion_tokens >= 1
    assert max(st.decode_rows + st.prefill_rows for st in steps) == 1
    with pytest.raises(ValueError, match="KV cache"):
        s.check_fits(8, 6)
    with pytest.raises(ValueError, match="context"):
        scheduler(GenerationPolicy(max_context=16)).check_fits(10, 7)
    with pytest.raises(ValueError, match="at most"):
        scheduler(GenerationPolicy(max_tokens=4)).check_fits(1, 5)
    assert s.stop(10)


def test_cancel_frees_the_slot_and_cut_all_ends_with_length():
    s = scheduler(GenerationPolicy(max_running=2))
    s.start()
    long = GenerationConfig(max_tokens=100, sampling=SamplingParams(temperature=0.0))
    a, b = Collector(), SlowCollector(0.005)
    ha = s.submit([1, 2, 3], long, a)
    s.submit([4, 5], long, b)
    while len(a.events) < 2:
        time.sleep(0.001)
    ha.cancel()
    assert a.finish.finish_reason == "cancelled"
    # b takes >= 0.5 s (its sink sleeps per token), so it is still running here even on a
    # loaded machine; the loop waits for a's slot to be released, never for b to end.
    deadline = time.monotonic() + 30
    while s.n_running > 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert s.n_running == 1 and not b.done.is_set()
    s.cut_all()
    fin = b.finish
    assert fin.finish_reason == "length" and fin.cut and fin.completion_tokens < 100
    while s.n_running:
        time.sleep(0.001)
    assert s.kv_bytes_used == 0
    assert s.stop(10)
    with pytest.raises(SchedulerStoppedError):
        s.submit([1], long, Collector())


def test_time_limit_and_exclusive_jobs_run_on_the_worker():
    s = scheduler(GenerationPolicy(timeout_s=0.002))  # 120 tiny-model tokens take ~36 ms on a quiet CPU: far past it
    s.start()
    k = Collector()
    s.submit([1, 2], GenerationConfig(max_tokens=120, sampling=SamplingParams(temperature=0.0)), k)
    fin = k.finish
    assert fin.finish_reason == "length" and fin.cut
    assert s.run_exclusive(lambda: threading.current_thread().name).result(10).endswith("-scheduler")
    assert s.stop(10)
