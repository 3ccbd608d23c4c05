"""Generation: sampling rules, chat template, EOS / max tokens / stop strings, batch = single, the CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from openhood.generate import GenerationConfig, SamplingParams
from openhood.generate.chat import ChatTemplate, ChatTemplateError
from openhood.generate.sampling import filtered_probs, sample

GREEDY = SamplingParams(temperature=0.0)


def test_greedy_is_argmax_and_seed_is_reproducible():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert sample(logits, GREEDY, np.random.default_rng()) == 1
    p = SamplingParams(temperature=1.0, seed=7)
    draws = [sample(logits, p, p.rng()) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same first draw
    many = {sample(logits, p, np.random.default_rng(i)) for i in range(200)}
    assert many >= {1, 2}


def test_top_k_and_top_p_keep_the_right_sets():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert np.count_nonzero(filtered_probs(logits, SamplingParams(temperature=1.0, top_k=2))) == 2
    kept = filtered_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))
    assert np.flatnonzero(kept).tolist() == [0, 1] and np.isclose(kept.sum(), 1.0)
    assert np.flatnonzero(filtered_probs(logits, SamplingParams(temperature=1.0, top_p=0.5))).tolist() == [0]
    hot = filtered_probs(logits, SamplingParams(temperature=10.0))
    assert hot.max() < 0.3  # high temperature flattens
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)


def test_chat_template_renders_like_the_model_defines_it(smollm2_gen):
    text = smollm2_gen.render("Hi")
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert smollm2_gen.render("raw <|im_end|>", raw=True) == "raw <|im_end|>"
    t = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}ok")
    assert t.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="user first"):
        t.render([{"role": "system", "content": "x"}])
    with pytest.raises(ChatTemplateError):
        t.render([{"role": "user"}])


def test_greedy_generation_stops_at_eos_and_never_prints_it(smollm2_gen):
    r = smollm2_gen.generate("What is the capital of France?", GenerationConfig(max_tokens=24, sampling=GREEDY))
    assert r.text == "The capital of France is Paris." and r.finish_reason == "stop"
    assert "<|im_end|>" not in r.text and 2 not in r.token_ids


def test_max_tokens_stop_strings_and_stream_pieces(smollm2_gen):
    cfg = GenerationConfig(max_tokens=5, sampling=GREEDY)
    r = smollm2_gen.generate("Write a haiku about the sea.", cfg)
    assert len(r.token_ids) == 5 and r.finish_reason == "length"
    assert "".join(smollm2_gen.stream("Write a haiku about the sea.", cfg)) == r.text
    stopped = smollm2_gen.generate(
        "What is the capital of France?", GenerationConfig(max_tokens=24, sampling=GREEDY, stop=("France",))
    )
    assert stopped.text == "The capital of " and stopped.finish_reason == "stop"


def test_batch_equals_single_sequences(smollm2_gen):
    prompts = ["Name a fruit.", "What is 2+2?", "Say hi"]
    cfg = GenerationConfig(max_tokens=8, sampling=SamplingParams(temperature=0.8, top_p=0.9, seed=3))
    batch = smollm2_gen.generate_batch(prompts, cfg)
    for p, r in zip(prompts, batch, strict=False):
        assert smollm2_gen.generate(p, cfg).token_ids == r.token_ids


def test_raw_prompt_parses_special_tokens(smollm2_gen):
    ids = smollm2_gen.encode_prompt("<|im_start|>user\nHi<|im_end|>", raw=True)
    assert ids[0] == 1 and ids[-1] == 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "openhood.cli", "generate", *args], capture_output=True, text=True, timeout=180
    )


def test_cli_streams_only_the_continuation():
    p = _cli("--temperature", "0", "--max-tokens", "16", "What is the capital of France?")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "The capital of France is Paris.\n"
    bad = _cli("--max-tokens", "0", "x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    missing = _cli("--model", "/nonexistent.gguf", "x")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    weights = _cli("--weights", "int3", "x")
    assert weights.returncode == 2 and "weights must be one of" in weights.stderr and "Traceback" not in weights.stderr


def test_quantized_weights_are_the_default_and_agree_with_float32(smollm2_gen, smollm2_path):
    from openhood.generate import Generator

    q = Generator(smollm2_path)
    assert q.weights == "quantized" and smollm2_gen.weights == "float32"
    assert q.model.weight_bytes * 4 < smollm2_gen.model.weight_bytes  # blocks kept, not widened
    cfg = GenerationConfig(max_tokens=24, sampling=SamplingParams(temperature=0.0))
    for prompt in ("What is the capital of France?", "Write a haiku about the sea."):
        assert q.generate(prompt, cfg).text == smollm2_gen.generate(prompt, cfg).text
    with pytest.raises(ValueError, match="weights"):
        Generator(smollm2_path, weights="int3")
