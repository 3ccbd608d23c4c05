"""The app in-process (no sockets): tracing content, server-wide --no-truncate, OTLP switch.

Uses the real tokenizer and engine (the ``Embedder``'s served model); spans go to the SDK's in-memory
exporter so the test can read every attribute and event of every span.
"""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from openhood.server.app import create_app
from openhood.server.config import ServerConfig
from openhood.server.tracing import make_tracer

MARKER = "qqzzsecretmarker"


@pytest.fixture(scope="module")
def models(embedder):
    return [embedder.model]


def test_spans_per_stage_carry_lengths_never_text(models):
    exporter = InMemorySpanExporter()
    tracer, provider = make_tracer(exporter)
    app = create_app(ServerConfig(), models, tracer=tracer)
    texts = [f"{MARKER} first private sentence", f"second {MARKER} " + "word " * 300]
    with TestClient(app) as c:
        resp = c.post("/v1/embeddings", json={"input": texts}, headers={"X-Request-ID": "trace-1"})
        assert resp.status_code == 200
    provider.shutdown()
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names.count("embeddings.request") == 1
    for stage in ("tokenize", "queue", "inference", "postprocess"):
        assert stage in names
    root = next(s for s in spans if s.name == "embeddings.request")
    assert root.attributes["openhood.inputs"] == 2
    assert root.attributes["openhood.max_tokens"] == models[0].max_length
    assert root.attributes["openhood.truncated"] == 1
    assert root.attributes["openhood.request_id"] == "trace-1"
    for s in spans:
        assert s.context.trace_id == root.context.trace_id
        assert s.start_time <= s.end_time
        blobs = [str(v) for v in s.attributes.values()] + [s.name]
        for ev in s.events:
            blobs += [ev.name, *map(str, ev.attributes.values())]
        for blob in blobs:
            assert MARKER not in blob and "private" not in blob and "word word" not in blob
    inference = [s for s in spans if s.name == "inference"]
    assert all(s.attributes["openhood.batch_size"] >= 1 for s in inference)


def test_server_wide_no_truncate_and_per_request_override(models):
    app = create_app(ServerConfig(truncate=False), models)
    with TestClient(app) as c:
        long = "word " * 400
        r = c.post("/v1/embeddings", json={"input": long})
        assert r.status_code == 413 and r.json()["error"]["code"] == "input_too_long"
        r = c.post("/v1/embeddings", json={"input": long, "truncate": True})
        assert r.status_code == 200 and r.json()["truncated_inputs"] == [0]


def test_tracing_is_off_without_endpoint_and_otlp_with_it(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    tracer, provider = make_tracer()
    assert isinstance(tracer, trace.NoOpTracer) and provider is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracer, provider = make_tracer()
    assert provider is not None and not isinstance(tracer, trace.NoOpTracer)
    provider.shutdown()  # no span was made: nothing is sent


def test_untokenizable_text_is_a_400_not_a_500():
    from .fakes import fake_model

    with TestClient(create_app(ServerConfig(), [fake_model()])) as c:
        r = c.post("/v1/embeddings", json={"input": ["fine", "bad\u0000text"]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_text"
        assert c.post("/v1/embeddings", json={"input": "fine"}).status_code == 200
