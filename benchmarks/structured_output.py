"""Structured output's cost: decode tokens/s with a response format's token masks vs without, same prompts.

The bundled SmolLM2 (the server's default weights, `--gen-weights`) generates for the same prompts, batch of
``--batch``, ``--max-tokens`` each, temperature 1 with fixed seeds: unconstrained, then
``json_object``, then a JSON schema (the person schema of tests/server/test_completion_features.py).
Tokens/s is decode speed: tokens after the first, over the time after the prompts' forward
(measured alone), so a short answer ("{}") is not charged its prompt. Each constrained run is timed twice: cold (the format's automaton compiled and every state's
token mask computed on first visit, as a server's first request with a new schema sees it) and
warm (masks cached, as every later request with that schema sees it). Prints tokens/s per run,
the ratio to unconstrained (the issue's goal: >= 0.75), in aggregate and per stream, and that every constrained output parses
(and validates against the schema).

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/structured_output.py

Absolute numbers depend on the shared machine's load; the same-run ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import time

import jsonschema

from openhood.generate import GenerationConfig, Generator, SamplingParams
from openhood.generate.json_grammar import response_format_dfa
from openhood.models.options import EngineOptions

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "languages": {"type": "array", "items": {"type": "string", "enum": ["en", "fr", "de"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
}
PROMPTS = [
    "Describe a person as JSON.",
    "Give me JSON about a city.",
    "Reply in JSON: who wrote Hamlet?",
    "Write a JSON object about your favourite food.",
]


def run(gen: Generator, config: GenerationConfig, batch: int, prefill_s: float = 0.0) -> tuple[float, float, list[str]]:
    """(Aggregate decode tokens/s, per-stream decode tokens/s, the texts). Aggregate: tokens after
    each sequence's first over the time after the prompts' forward (``prefill_s``, measured alone),
    so a short constrained answer is not charged its prompt; it also falls when answers end early
    and leave the batch part empty. Per stream: decode steps per second (every running sequence
    gets one token per step), the rate each client sees, whatever the other answers' lengths."""
    prompts = (PROMPTS * batch)[:batch]
    t0 = time.perf_counter()
    results = gen.generate_batch(prompts, config)
    seconds = time.perf_counter() - t0 - prefill_s
    steps = max(len(r.token_ids) for r in results) - 1
    return sum(len(r.token_ids) - 1 for r in results) / seconds, steps / seconds, [r.text for r in results]


def prefill_seconds(gen: Generator, batch: int, sampling: SamplingParams) -> float:
    """The prompts' forward and one sample: a max_tokens=1 run, best of three."""
    prompts = (PROMPTS * batch)[:batch]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        gen.generate_batch(prompts, GenerationConfig(1, sampling))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    gen = Generator(weights=EngineOptions.decoder_weights)  # the server's default (--gen-weights)
    sampling = SamplingParams(temperature=1.0, seed=7)
    plain = GenerationConfig(args.max_tokens, sampling)
    run(gen, plain, args.batch)  # warm-up: the engine's kernels and pages
    prefill_s = prefill_seconds(gen, args.batch, sampling)
    base, base_stream, _ = run(gen, plain, args.batch, prefill_s)
    print(
        f"unconstrained: {base:.1f} decode tokens/s, {base_stream:.1f} per stream "
        f"(batch {args.batch}, max_tokens {args.max_tokens})"
    )
    formats = {
        "json_object": ({"type": "json_object"}, None),
        "json_schema": ({"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}, PERSON),
    }
    for name, (rf, schema) in formats.items():
        t0 = time.perf_counter()
        grammar = gen.grammars.get(json.dumps(rf), lambda rf=rf: response_format_dfa(rf))
        compile_s = time.perf_counter() - t0
        config = GenerationConfig(args.max_tokens, sampling, grammar=grammar)
        masked = [0, 0.0]  # calls, seconds in the grammar's masking (the constrained path's own cost)
        constrain = grammar.constrain

        def timed(*a, constrain=constrain, masked=masked):
            t = time.perf_counter()
            out = constrain(*a)
            masked[0] += 1
            masked[1] += time.perf_counter() - t
            return out

        grammar.constrain = timed  # type: ignore[method-assign]
        for label in ("cold", "warm"):
            masked[:] = [0, 0.0]
            t_run = time.perf_counter()
            tps, stream_tps, texts = run(gen, config, args.batch, prefill_s)
            share = masked[1] / (time.perf_counter() - t_run)
            print(f"  lengths: {[len(t) for t in texts]} chars")
            for text in texts:
                value = json.loads(text)
                if schema is not None:
                    jsonschema.validate(value, schema)
            print(
                f"{name} ({label}): {tps:.1f} tokens/s = {tps / base:.2f}x unconstrained, per stream "
                f"{stream_tps:.1f} = {stream_tps / base_stream:.2f}x; masks"
                f" {1000 * masked[1] / max(masked[0], 1):.1f} ms/token, {100 * share:.1f}% of the run"
                f"{f'; compiled in {compile_s:.2f} s, {grammar.dfa.n_states} states' if label == 'cold' else ''};"
                f" {len(texts)}/{len(texts)} outputs parse{' and validate' if schema else ''}"
            )


if __name__ == "__main__":
    main()
