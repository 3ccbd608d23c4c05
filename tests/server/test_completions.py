"""The generate task through a real `openhood serve` process: /v1/chat/completions and
/v1/completions with the official `openai` SDK (streaming unchanged), greedy output equal to
the `Generator`'s, concurrent streams, stop strings, errors, disconnects, metrics and the drain.

One server serves SmolLM2 (GGUF) beside an embedding model for the whole module (a model load
is slow on shared cores); the last test drains it with SIGTERM. Outputs are kept to a few
tokens except the one stream the drain must cut.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import httpx
import openai
import pytest

from openhood.generate import GenerationConfig, SamplingParams

from .conftest import ServerProcess

GREEDY = SamplingParams(temperature=0.0)
QUESTION = "What is the capital of France?"
SECRET = "zebracorn"  # a word that must never reach a log line


@pytest.fixture(scope="module")
def gen_server(tmp_path_factory, smollm2_path):
    srv = ServerProcess(
        tmp_path_factory.mktemp("gen") / "server.log",
        "--model",
        f"smollm2={smollm2_path}",
        "--model",
        "minilm=",
        "--workers",
        "1",
        "--threads",
        "1",
        "--buckets",
        "32",
        "--gen-max-running",
        "4",
        "--gen-max-tokens",
        "1000",
        "--gen-max-context",
        "1024",
        # With a generate model the drain cuts sequences a quarter of the grace period (at most
        # 3 s) before its end: room for a step (slow on shared cores) and the last chunks.
        "--grace-period",
        "10",
    )
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def sdk(gen_server):
    return openai.OpenAI(base_url=gen_server.url + "/v1", api_key="unused", timeout=120.0, max_retries=0)


def metric(c: httpx.Client, name: str) -> float:
    m = re.search(rf'^{name}\{{model="smollm2"\}} (\S+)$', c.get("/metrics").text, re.M)
    assert m, name
    return float(m.group(1))


def test_models_lists_the_generator_beside_the_embedder_and_readiness_generates(gen_server):
    with gen_server.client() as c:
        models = {m["id"]: m["task"] for m in c.get("/v1/models").json()["data"]}
        assert models == {"smollm2": "generate", "minilm": "embed"}
        ready = c.get("/health/ready").json()
        assert ready["status"] == "ready" and ready["models"]["smollm2"]["probe_tokens"] == 1
        emb = c.post("/v1/embeddings", json={"model": "minilm", "input": "still embedding"})
        assert emb.status_code == 200 and len(emb.json()["data"][0]["embedding"]) == 384


def test_greedy_completion_equals_the_generator(sdk, smollm2_gen):
    want = smollm2_gen.generate(QUESTION, GenerationConfig(max_tokens=12, sampling=GREEDY))
    r = sdk.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": QUESTION}], max_tokens=12, temperature=0
    )
    assert r.choices[0].message.content == want.text and r.choices[0].finish_reason == want.finish_reason
    assert r.usage.prompt_tokens == len(smollm2_gen.encode_prompt(QUESTION))
    raw = "The three primary colors are"
    want = smollm2_gen.generate(raw, GenerationConfig(max_tokens=5, sampling=GREEDY), raw=True)
    r = sdk.completions.create(model="smollm2", prompt=raw, max_tokens=5, temperature=0)
    assert r.choices[0].text == want.text and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(smollm2_gen.encode_prompt(raw, raw=True)), 5)


def test_two_concurrent_streams_finish_with_the_right_text(sdk, smollm2_gen):
    questions = ["Name a color.", "Name a fruit."]
    want = [smollm2_gen.generate(q, GenerationConfig(max_tokens=6, sampling=GREEDY)).text for q in questions]
    got: dict[int, tuple[str, str | None, object]] = {}

    def stream(i: int) -> None:
        chunks = list(
            sdk.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": questions[i]}],
                max_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        finish = next(ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert not chunks[-1].choices  # the usage chunk comes last, with no choices
        got[i] = (text, finish, chunks[-1].usage)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join(300) for t in threads]
    for i in range(2):
        text, finish, usage = got[i]
        assert text == want[i] and finish in ("stop", "length")
        assert usage.completion_tokens >= 1 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stop_strings_are_never_emitted_even_across_tokens(gen_server, sdk):
    full = "The capital of France is Paris."  # greedy answer (test above); " is" and " Paris" are two tokens
    messages = [{"role": "user", "content": QUESTION}]
    r = sdk.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0, stop="s Pa")
    assert r.choices[0].message.content == full[: full.index("s Pa")] and r.choices[0].finish_reason == "stop"
    pieces = [
        ch.choices[0].delta.content or ""
        for ch in sdk.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=12, temperature=0, stop=["nowhere", "s Pa"], stream=True
        )
    ]
    assert "".join(pieces) == full[: full.index("s Pa")]
    assert not any("Pa" in p for p in pieces)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b'{"messages": [', 400, None),  # malformed JSON
        (b'{"messages": "hi"}', 422, "messages"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}', 422, "temperature"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 3}', 422, "temperature"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "n": 2}', 400, "n"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "model": "nope"}', 404, "model"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "model": "minilm"}', 400, "model"),  # an embedding model
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1001}',
            400,
            "max_tokens",
        ),  # > --gen-max-tokens
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": true}}',
            400,
            "stream_options",
        ),
    ],
)
def test_bad_chat_requests(gen_server, body, status, param):
    with gen_server.client() as c:
        r = c.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_prompt_too_long_and_bad_completions(gen_server, sdk):
    with pytest.raises(openai.BadRequestError, match="context of 1024 tokens") as e:
        sdk.completions.create(model="smollm2", prompt="word " * 1100, max_tokens=4)
    assert e.value.code == "context_length_exceeded"
    with gen_server.client() as c:
        r = c.post("/v1/completions", json={"prompt": ["a", "b"]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
        r = c.post("/v1/completions", json={"prompt": "hi", "echo": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_disconnect_frees_the_sequence(gen_server):
    with gen_server.client() as c:
        assert metric(c, "openhood_generation_running_sequences") == 0
        with c.stream(
            "POST",
            "/v1/completions",
            json={"prompt": "Count: 1, 2, 3,", "max_tokens": 64, "stream": True, "temperature": 0},
        ) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            assert next(line for line in lines if line.startswith("data: ")).startswith("data: {")
            assert metric(c, "openhood_generation_running_sequences") == 1
        # leaving the block closed the connection mid-stream: the slot is freed at the next step
        deadline = time.monotonic() + 60
        while metric(c, "openhood_generation_running_sequences") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(c, "openhood_generation_running_sequences") == 0
        assert metric(c, "openhood_kv_cache_bytes_used") == 0
        text = c.get("/metrics").text
        assert re.search(r'openhood_generation_finished_total\{model="smollm2",reason="cancelled"\} [1-9]', text)


def test_metrics_and_log_line_carry_counts_never_text(gen_server, sdk):
    sdk.completions.create(model="smollm2", prompt=f"My pet {SECRET} likes", max_tokens=4, temperature=0)
    with gen_server.client() as c:
        text = c.get("/metrics").text
        assert metric(c, "openhood_generated_tokens_total") >= 4
        for name in ("openhood_generation_ttft_seconds_count", "openhood_generation_inter_token_seconds_count"):
            assert float(re.search(rf'^{name}\{{model="smollm2"\}} (\S+)$', text, re.M).group(1)) >= 1
        assert 'openhood_generation_waiting_sequences{model="smollm2"}' in text
        assert 'openhood_tokens_per_second{model="smollm2"}' in text
    lines = [e for e in gen_server.log_lines() if e.get("route") == "/v1/completions" and e.get("status") == 200]
    last = lines[-1]
    assert last["model"] == "smollm2" and last["completion_tokens"] == 4 and last["finish_reason"] == "length"
    assert last["prompt_tokens"] > 0 and last["ttft_ms"] > 0 and "queue_ms" in last
    assert SECRET not in gen_server.log_text()


def test_trace_spans_carry_counts_never_text(smollm2_gen):
    """In-process app (no socket) on the session's Generator, spans to the in-memory exporter."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from starlette.testclient import TestClient

    from openhood.models.generation import ServedGenerator
    from openhood.server.app import create_app
    from openhood.server.config import ServerConfig
    from openhood.server.tracing import make_tracer

    exporter = InMemorySpanExporter()
    tracer, provider = make_tracer(exporter)
    app = create_app(ServerConfig(), [ServedGenerator("smollm2", smollm2_gen.path, smollm2_gen)], tracer=tracer)
    with TestClient(app) as c:
        r = c.post("/v1/completions", json={"prompt": f"The {SECRET} said", "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    provider.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"generation.request", "tokenize", "queue", "prefill", "decode"} <= set(spans)
    root = spans["generation.request"]
    assert root.attributes["openhood.completion_tokens"] == 2 and root.attributes["openhood.finish_reason"] == "length"
    assert root.attributes["openhood.prompt_tokens"] == len(smollm2_gen.encode_prompt(f"The {SECRET} said", raw=True))
    for span in spans.values():
        assert span.context.trace_id == root.context.trace_id
        assert all(SECRET not in str(v) for v in span.attributes.values())


def test_sigterm_cuts_running_streams_at_the_grace_period(gen_server):
    """Last in the module: it drains the shared server."""
    srv = gen_server
    events: list[dict] = []
    started = threading.Event()

    def stream() -> None:
        with (
            srv.client() as c,
            c.stream(
                "POST",
                "/v1/completions",
                json={"prompt": "Once upon a time", "max_tokens": 1000, "stream": True, "temperature": 0},
            ) as r,
        ):
            for line in r.iter_lines():
                if line.startswith("data: "):
                    started.set()
                    events.append({"done": True} if line == "data: [DONE]" else json.loads(line[6:]))

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(120)
    t_signal = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    with srv.client() as c:
        while c.get("/health/ready").status_code != 503:
            assert time.monotonic() - t_signal < 5
            time.sleep(0.01)
        late = c.post("/v1/completions", json={"prompt": "too late", "max_tokens": 2})
        assert late.status_code == 503 and late.json()["error"]["code"] == "draining"
    t.join(60)
    assert events[-1] == {"done": True}
    assert events[-2]["choices"][0]["finish_reason"] == "length"  # cut, but a complete, well-formed answer
    assert srv.proc.wait(30) == 0 and time.monotonic() - t_signal < 15
    logs = srv.log_lines()
    assert any(e.get("event") == "generation_cut" for e in logs)
    assert any(e.get("route") == "/v1/completions" and e.get("cut") and e.get("status") == 200 for e in logs)
