"""Structured output: the schema → byte-DFA compiler accepts what the schema allows (in our compact
form) and nothing else, refuses what is outside its subset by name; the vectorized token masks equal
the per-token reference walk on SmolLM2's real vocabulary; and 50 prompt/schema pairs sampled from
the real model (temperature 1, tight budgets) through the continuous-batching scheduler, beside
unconstrained sequences, all parse and validate with ``jsonschema``."""

from __future__ import annotations

import json
import threading

import jsonschema
import numpy as np
import pytest

from openhood.generate.generator import GenerationConfig
from openhood.generate.json_grammar import SchemaError, response_format_dfa
from openhood.generate.sampling import SamplingParams
from openhood.generate.token_mask import ends_fast, ends_reference
from openhood.scheduler.generation import FinishEvent, GenerationScheduler
from openhood.scheduler.policy import GenerationPolicy

OBJ = {"type": "json_object"}


def fmt(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}


def accepts(rf: dict, text: str) -> bool:
    dfa = response_format_dfa(rf)
    state = dfa.walk(0, text.encode())
    return state >= 0 and bool(dfa.accepting[state])


ITEM = {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["id"]}
SCHEMAS = [
    {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    },
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {
        "type": "object",
        "properties": {"items": {"type": "array", "items": ITEM, "minItems": 1, "maxItems": 3}},
        "required": ["items"],
    },
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "location": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
            },
        },
        "required": ["city", "location"],
    },
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8}}}},
    {
        "type": "object",
        "properties": {"answer": {"type": ["string", "null"], "maxLength": 10}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
    },
    {
        "type": "object",
        "properties": {
            "version": {"const": 2},
            "score": {"type": "number"},
            "note": {"type": "string", "maxLength": 6},
        },
        "required": ["version", "score"],
    },
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 16},
            "author": {
                "type": "object",
                "properties": {
                    "first": {"type": "string", "maxLength": 10},
                    "last": {"type": "string", "maxLength": 10},
                },
                "required": ["last"],
            },
            "year": {"type": "integer"},
        },
        "required": ["title", "author"],
    },
    {"type": "object", "properties": {"mood": {"enum": ["happy", "sad", 3, None, True]}}, "required": ["mood"]},
]
PROMPTS = [
    "Reply with JSON describing a person.",
    "Give me some data as JSON.",
    "Write a JSON answer about the weather in Paris.",
    "Output JSON for a book you like.",
    "Describe your day in JSON.",
]


@pytest.mark.parametrize(
    ("rf", "text", "ok"),
    [
        (OBJ, '{"a":[1,-2.5e3,{"b":null}],"c":"x\\"y\\u00e9é"}', True),
        (OBJ, '{"a": 1, "b": true}', True),
        (OBJ, "[1,2]", False),  # json_object: an object at the top
        (OBJ, '{"a":01}', False),
        (OBJ, '{ "a":1}', False),  # compact: spaces only after ':' and ','
        (fmt(SCHEMAS[0]), '{"name":"Al","age":30}', True),
        (fmt(SCHEMAS[0]), '{"name":"","age":30}', False),  # minLength 1
        (fmt(SCHEMAS[0]), '{"name":"Abcdefghijklm","age":30}', False),  # 13 > maxLength
        (fmt(SCHEMAS[0]), '{"age":30,"name":"Al"}', False),  # schema order
        (fmt(SCHEMAS[0]), '{"name":"Al"}', False),  # required
        (fmt(SCHEMAS[1]), '{"color":"green"}', True),
        (fmt(SCHEMAS[1]), '{"color":"pink"}', False),
        (fmt(SCHEMAS[2]), '{"items":[{"id":1},{"id":2,"ok":false}]}', True),
        (fmt(SCHEMAS[2]), '{"items":[]}', False),
        (fmt(SCHEMAS[4]), "{}", True),
        (fmt(SCHEMAS[7]), "[1,2,3,4,5]", False),
        (fmt(SCHEMAS[9]), '{"mood":null}', True),
    ],
)
def test_the_automaton_accepts_exactly_the_compact_texts_the_schema_allows(rf, text, ok):
    assert accepts(rf, text) is ok
    if ok and rf is not OBJ:
        jsonschema.validate(json.loads(text), rf["json_schema"]["schema"])


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "string", "pattern": "^a", "format": "date"}, "format, pattern"),
        ({"$ref": "#/defs/a"}, "$ref"),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}, "schema.properties.a"),
        ({"type": "integer", "minimum": 3}, "minimum"),
        ({"type": "string", "maxLength": 1000}, "maxLength"),
        ({"type": "object", "properties": {}, "required": ["x"]}, "required"),
        ({"type": "tuple"}, "type"),
    ],
)
def test_what_is_outside_the_subset_is_refused_by_name(schema, named):
    with pytest.raises(SchemaError, match=named.replace("$", r"\$")):
        response_format_dfa(fmt(schema))


def test_the_vectorized_token_walk_equals_the_reference_on_the_real_vocabulary(smollm2_gen):
    grammar = smollm2_gen.grammars.get(b"test-walk", lambda: response_format_dfa(fmt(SCHEMAS[3])))
    rng = np.random.default_rng(0)
    for state in [0, *rng.choice(grammar.dfa.n_states, 4, replace=False)]:
        fast = ends_fast(grammar.dfa, grammar.vocab, int(state))
        assert np.array_equal(fast, ends_reference(grammar.dfa, grammar.vocab, int(state)))


@pytest.mark.timeout(900)  # ~2k tokens through the real model: minutes on two shared cores
def test_fifty_sampled_outputs_parse_and_validate_under_continuous_batching(smollm2_gen):
    """50 prompt/schema pairs (temperature 1, budgets tight enough that many answers are steered to
    finish by ``max_tokens``) decoded together in 16 slots beside unconstrained sequences."""
    gen = smollm2_gen
    sched = GenerationScheduler(
        gen.model,
        GenerationPolicy(max_running=16, max_context=512, timeout_s=3600),  # a time cut would end a text early
        eos_ids=gen.eos_ids,
        new_decoder=lambda: gen.tokenizer.stream_decoder(skip_special_tokens=True),
        context_length=gen.model.config.context_length,
    )
    jobs = []
    for i, schema in enumerate(SCHEMAS):
        grammar = gen.grammars.get(json.dumps(schema), lambda s=schema: response_format_dfa(fmt(s)))
        for j, prompt in enumerate(PROMPTS):
            config = GenerationConfig(
                grammar.min_tokens + 8, SamplingParams(temperature=1.0, seed=10 * i + j), grammar=grammar
            )
            jobs.append((schema, gen.encode_prompt(prompt), config))
    free = [
        (None, gen.encode_prompt(p), GenerationConfig(8, SamplingParams(temperature=1.0, seed=j)))
        for j, p in enumerate(PROMPTS[:4])
    ]
    sinks = []
    for _, ids, config in jobs + free:
        sinks.append(Sink())
        sched.submit(ids, config, sinks[-1])
    sched.start()
    try:
        texts = [k.text() for k in sinks]
    finally:
        sched.stop(30)
    bad = [(text, schema) for (schema, _, _), text in zip(jobs, texts, strict=False) if not _valid(text, schema)]
    assert not bad
    assert len(jobs) == 50 and all(texts[len(jobs) :])


def _valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


class Sink:
    def __init__(self) -> None:
        self.events: list = []
        self.done = threading.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        if isinstance(event, FinishEvent):
            self.done.set()

    def text(self) -> str:
        assert self.done.wait(600)
        assert self.events[-1].finish_reason in ("stop", "length") and not self.events[-1].cut
        return "".join(e.text for e in self.events)
