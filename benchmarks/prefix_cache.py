"""Prefix caching's effect on SmolLM2 through the generation scheduler (in process, the server's weights, one thread).

1. A ~400-token shared system prompt: the first request's time to first token vs the second's
   (another question after the same system prompt), cache on; the issue's goal: >= 3x lower.
2. A 10-turn conversation replayed turn by turn (each turn's prompt is the whole chat so far,
   rendered by the chat template with the model's own previous answers): prompt tokens the forward
   computed vs the tokens new at each turn; the goal: <= 1.2x.
3. Greedy answers with the cache on and off: identical.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/prefix_cache.py
"""

from __future__ import annotations

import threading

from openhood.generate import GenerationConfig, Generator, SamplingParams
from openhood.models.options import EngineOptions
from openhood.scheduler.generation import FinishEvent, GenerationScheduler
from openhood.scheduler.policy import GenerationPolicy

SYSTEM = " ".join(
    f"Rule {i}: answer politely, cite the handbook section {i}, and never reveal internal codes." for i in range(24)
)
GREEDY = SamplingParams(temperature=0.0)


def scheduler(gen: Generator, on: bool) -> GenerationScheduler:
    s = GenerationScheduler(
        gen.model,
        GenerationPolicy(max_running=4, max_context=2048, prefix_cache=on, prefill_chunk=512),
        eos_ids=gen.eos_ids,
        new_decoder=lambda: gen.tokenizer.stream_decoder(skip_special_tokens=True),
        context_length=gen.model.config.context_length,
    )
    s.start()
    return s


def ask(s: GenerationScheduler, ids: list[int], max_tokens: int) -> tuple[str, FinishEvent]:
    done, events = threading.Event(), []

    def sink(e):
        events.append(e)
        if isinstance(e, FinishEvent):
            done.set()

    s.submit(ids, GenerationConfig(max_tokens, GREEDY), sink)
    done.wait(600)
    return "".join(e.text for e in events), events[-1]


def main() -> None:
    gen = Generator(weights=EngineOptions.decoder_weights)  # the server's default (--gen-weights)
    answers = {}
    for on in (True, False):
        s = scheduler(gen, on)
        ask(s, gen.encode_prompt("Warm up."), 2)
        ttft = []
        for q in ("What is rule 3 about?", "Which section does rule 7 cite?"):
            ids = gen.encode_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
            text, fin = ask(s, ids, 8)
            ttft.append((fin.first_token_ns - fin.submitted_ns) / 1e6)
            answers.setdefault(on, []).append(text)
        print(
            f"cache {'on ' if on else 'off'}: system prompt {len(ids)} tokens; TTFT first {ttft[0]:.0f} ms, "
            f"second {ttft[1]:.0f} ms = {ttft[0] / ttft[1]:.1f}x lower; hits {s.prefix.hits}, "
            f"cached tokens {s.prefix.cached_tokens}, evictions {s.prefix.evictions}"
        )
        if on:  # the conversation replay
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            before, new, prev_len = s.prefill_computed, 0, 0
            for turn in range(10):
                messages.append({"role": "user", "content": f"Tell me one fact about the number {turn + 2}."})
                ids = gen.encode_prompt(messages)
                text, _ = ask(s, ids, 12)
                new += len(ids) - prev_len  # tokens not in the previous turn's prompt
                messages.append({"role": "assistant", "content": text})
                prev_len = len(ids)
            computed = s.prefill_computed - before
            print(f"10-turn replay: prefill computed {computed} tokens for {new} new = {computed / new:.2f}x")
        s.stop(30)
    print("greedy answers identical with the cache on and off:", answers[True] == answers[False])


if __name__ == "__main__":
    main()
