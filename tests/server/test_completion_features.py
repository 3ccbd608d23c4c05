"""logprobs and structured output through a real `openhood serve` process and the official `openai`
SDK's own parameters (``logprobs``/``top_logprobs``, legacy ``logprobs``, ``response_format``):
OpenAI's shapes, streaming and not; values equal to a float64 log-softmax of the engine's logits
(the same float32 SmolLM2 the server runs, fed the same tokens); constrained outputs parse and
validate, beside unconstrained streams in the same batch; bad values get 400/422 naming the field;
a shared system prompt is served from the prefix cache with the same greedy answers, and counted."""

from __future__ import annotations

import json
import threading

import jsonschema
import numpy as np
import openai
import pytest

from openhood.generate import GenerationConfig, SamplingParams

from .test_completions import gen_server, metric, sdk  # noqa: F401 -- the module's own server, the same settings

QUESTION = "What is the capital of France?"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "languages": {"type": "array", "items": {"type": "string", "enum": ["en", "fr", "de"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def engine_logprobs(gen, prompt_ids: list[int], tokens: list[int]) -> list[np.ndarray]:
    """float64 log-softmax of the model's logits before each of ``tokens`` (V,) per position."""
    model = gen.model
    cache = model.new_cache(1, len(prompt_ids) + len(tokens) + 1)
    logits = model.forward([np.asarray(prompt_ids, dtype=np.int64)], [0], cache)[0]
    out = []
    for t in tokens:
        x = logits.astype(np.float64)
        out.append(x - x.max() - np.log(np.exp(x - x.max()).sum()))
        logits = model.forward([np.array([t], dtype=np.int64)], [0], cache)[0]
    return out


def test_chat_logprobs_equal_the_engines_log_softmax(sdk, smollm2_gen):  # noqa: F811
    messages = [{"role": "user", "content": QUESTION}]
    r = sdk.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert b"".join(bytes(e.bytes) for e in content).decode() == r.choices[0].message.content
    tok = smollm2_gen.tokenizer
    ids = [next(i for i in range(tok.vocab_size) if tok.token_bytes(i) == bytes(e.bytes)) for e in content]
    want = engine_logprobs(smollm2_gen, smollm2_gen.encode_prompt(messages), ids)
    for e, token, logp in zip(content, ids, want, strict=True):
        assert e.logprob == pytest.approx(logp[token], abs=1e-4)
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token  # greedy: the top token
        best = np.argsort(-logp, kind="stable")[:3]
        assert [bytes(t.bytes) for t in e.top_logprobs] == [tok.token_bytes(int(i)) for i in best]
        np.testing.assert_allclose([t.logprob for t in e.top_logprobs], logp[best], atol=1e-4)
    streamed = [
        lp
        for ch in sdk.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3, stream=True
        )
        if ch.choices and ch.choices[0].logprobs
        for lp in ch.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in content]
    # the second request's prompt came from the prefix cache: its last token alone was recomputed,
    # a different chunking of the same float32 forward (differences ~1e-6)
    np.testing.assert_allclose([e.logprob for e in streamed], [e.logprob for e in content], atol=1e-4)
    plain = sdk.chat.completions.create(model="smollm2", messages=messages, max_tokens=2, temperature=0)
    assert plain.choices[0].logprobs is None


def test_legacy_completions_logprobs_columns(sdk):  # noqa: F811
    prompt = "The three primary colors are"
    r = sdk.completions.create(model="smollm2", prompt=prompt, max_tokens=5, temperature=0, logprobs=2)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == text and lp.text_offset[0] == 0
    for token, logprob, top, offset in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset, strict=True):
        assert len(top) == 2 and top[token] == logprob and logprob <= 0  # greedy: the sampled token is the best
        assert text[offset : offset + len(token)] == token
    chunks = list(
        sdk.completions.create(model="smollm2", prompt=prompt, max_tokens=5, temperature=0, logprobs=2, stream=True)
    )
    streamed = [t for ch in chunks if ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert streamed == lp.tokens
    offsets = [o for ch in chunks if ch.choices[0].logprobs for o in ch.choices[0].logprobs.text_offset]
    assert offsets == lp.text_offset


@pytest.mark.parametrize(
    ("path", "extra", "status", "param"),
    [
        ("/v1/chat/completions", {"top_logprobs": 2}, 400, "top_logprobs"),  # without logprobs: true
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, 422, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": "yes"}, 422, "logprobs"),
        ("/v1/completions", {"logprobs": 21}, 422, "logprobs"),
        ("/v1/chat/completions", {"response_format": {"type": "xml"}}, 400, "response_format"),
        ("/v1/chat/completions", {"response_format": {"type": "json_schema"}}, 400, "response_format"),
        (
            "/v1/chat/completions",
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+", "format": "email"}},
                }
            },
            400,
            "response_format",
        ),
        (
            "/v1/chat/completions",
            {
                "max_tokens": 3,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
            },
            400,
            "max_tokens",
        ),
    ],
)
def test_bad_logprobs_and_response_formats(gen_server, path, extra, status, param):  # noqa: F811
    body = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    with gen_server.client() as c:
        r = c.post(path, json={**body, **extra})
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    if "pattern" in json.dumps(extra):
        assert "format, pattern" in r.json()["error"]["message"]  # every unsupported keyword, named


def test_structured_output_beside_unconstrained_streams(sdk):  # noqa: F811
    schema_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    results: dict[str, str] = {}

    def constrained(i: int) -> None:
        r = sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": f"Describe person number {i} as JSON."}],
            max_tokens=48,
            temperature=1.0,
            seed=i,
            response_format=schema_format,
        )
        results[f"schema{i}"] = r.choices[0].message.content

    def json_object() -> None:
        pieces = sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
            max_tokens=40,
            temperature=0.8,
            seed=3,
            response_format={"type": "json_object"},
            stream=True,
        )
        results["object"] = "".join(ch.choices[0].delta.content or "" for ch in pieces if ch.choices)

    def free() -> None:
        pieces = sdk.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0, stream=True
        )
        results["free"] = "".join(ch.choices[0].delta.content or "" for ch in pieces if ch.choices)

    threads = [threading.Thread(target=constrained, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=json_object), threading.Thread(target=free)]
    [t.start() for t in threads]
    [t.join(300) for t in threads]
    for i in range(2):
        jsonschema.validate(json.loads(results[f"schema{i}"]), PERSON)
    assert isinstance(json.loads(results["object"]), dict)
    assert results["free"].startswith("The capital of France is Paris")  # unconstrained rows are untouched


def test_sdk_accepts_a_bad_schema_error(sdk):  # noqa: F811
    with pytest.raises(openai.BadRequestError, match=r"\$ref") as e:
        sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": {"$ref": "#/x"}}},
        )
    assert e.value.code == "unsupported_schema"


def test_a_shared_system_prompt_comes_from_the_prefix_cache_with_the_same_answers(gen_server, sdk, smollm2_gen):  # noqa: F811
    system = "You are a terse assistant for a museum. " * 12
    with gen_server.client() as c:
        before = metric(c, "openhood_prefix_cache_cached_tokens_total")
        for q in ("Name a color.", "Name a fruit."):
            messages = [{"role": "system", "content": system}, {"role": "user", "content": q}]
            want = smollm2_gen.generate(
                messages, GenerationConfig(max_tokens=5, sampling=SamplingParams(temperature=0))
            )
            r = sdk.chat.completions.create(model="smollm2", messages=messages, max_tokens=5, temperature=0)
            assert r.choices[0].message.content == want.text
        shared = len(smollm2_gen.encode_prompt([{"role": "system", "content": system}]))
        assert metric(c, "openhood_prefix_cache_cached_tokens_total") - before >= shared - 8  # the system turn at least
        assert metric(c, "openhood_prefix_cache_hits_total") >= 1
