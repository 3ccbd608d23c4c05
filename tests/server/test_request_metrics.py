"""The request signals a dashboard needs (TEI's set under openhood's names), in-process: count,
success and failure per served model and route, failures by error code; labels never carry a
name the client made up."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from openhood.server.app import create_app
from openhood.server.config import ServerConfig

KEY = "k-metrics"


@pytest.fixture(scope="module")
def scraped(embedder):
    app = create_app(ServerConfig(api_key=KEY), [embedder.model])
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app) as c:
        assert c.post("/v1/embeddings", json={"input": ["one", "two"]}, headers=auth).status_code == 200
        assert c.post("/embed", json={"inputs": "three"}, headers=auth).status_code == 200
        assert c.post("/embed", json={"inputs": "four"}, headers=auth).status_code == 200
        assert c.post("/tokenize", json={"inputs": "five"}, headers=auth).status_code == 200
        assert c.post("/v1/embeddings", json={"input": ["x"], "model": "made-up-name"}, headers=auth).status_code == 404
        assert c.post("/embed", json={"inputs": 5}, headers=auth).status_code == 422
        assert c.post("/embed", json={"inputs": "x"}).status_code == 401
        assert c.post("/v1/embeddings", content=b"{not json", headers=auth).status_code == 400
        text = c.get("/metrics").text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, embedder.model.name


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_count_success_failure_by_model_and_route(scraped):
    samples, model = scraped
    ok = "openhood_requests_total"
    assert value(samples, ok, model=model, route="/v1/embeddings", outcome="success") == 1
    assert value(samples, ok, model=model, route="/embed", outcome="success") == 2
    assert value(samples, ok, model=model, route="/tokenize", outcome="success") == 1
    # Refused before a model was chosen: model="" (never the client's made-up name).
    assert value(samples, ok, model="", route="/v1/embeddings", outcome="failure") == 2
    assert value(samples, ok, model="", route="/embed", outcome="failure") == 2
    assert not any("made-up-name" in str(labels) for _, labels in samples)


def test_failures_by_error_code(scraped):
    samples, _ = scraped
    fail = "openhood_request_failures_total"
    assert value(samples, fail, model="", route="/v1/embeddings", error="model_not_found") == 1
    assert value(samples, fail, model="", route="/v1/embeddings", error="invalid_json") == 1
    assert value(samples, fail, model="", route="/embed", error="invalid_schema") == 1
    assert value(samples, fail, model="", route="/embed", error="invalid_api_key") == 1


def test_stage_queue_and_batch_signals_exist(scraped):
    samples, model = scraped
    for stage in ("total", "tokenize", "queue", "inference", "postprocess"):
        assert (
            value(samples, "openhood_request_stage_seconds_count", model=model, stage=stage) == 3
        )  # the 3 embeddings (/tokenize runs no model)
    assert ("openhood_queue_depth", (("model", model),)) in samples
    assert value(samples, "openhood_batch_size_count", model=model) >= 3
    assert value(samples, "openhood_batch_tokens_count", model=model) >= 3


def test_tokens_per_second_window_is_bounded_without_scrapes(monkeypatch):
    """The gauge's window forgets old entries on every append: a server nobody scrapes used to
    keep one tuple per batch for ever (the 30-minute soak's top growing site)."""
    from openhood.server import metrics as metrics_module
    from openhood.server.metrics import THROUGHPUT_WINDOW_S, ServerMetrics

    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    m = ServerMetrics().for_model("m", lambda: 0.0)
    for _ in range(5000):  # one batch every 10 ms for 50 s, never scraped
        m.observe_tokens(7)
        clock[0] += 0.01
    assert len(m._throughput) <= THROUGHPUT_WINDOW_S / 0.01 + 1
    assert m._tokens_per_s() == pytest.approx(7 / 0.01, rel=0.01)
