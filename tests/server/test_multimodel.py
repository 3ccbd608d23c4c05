"""Several models in one real server process: listing, routing by `model`, 404s, per-model metrics."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.models import default_model_dir

from .conftest import ServerProcess


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    folder = str(default_model_dir())
    srv = ServerProcess(tmp_path_factory.mktemp("multi") / "server.log",
                        "--model", f"first={folder}", "--model", f"second={folder}",
                        "--workers", "1", "--threads", "1", "--buckets", "32")
    yield srv
    assert srv.stop() == 0


def test_models_are_listed_routed_by_name_and_unknown_is_404(two_models):
    with two_models.client() as c:
        listed = c.get("/v1/models").json()
        assert [m["id"] for m in listed["data"]] == ["first", "second"]
        assert all(m["task"] == "embed" and m["dim"] == 384 for m in listed["data"])
        a = c.post("/v1/embeddings", json={"input": "route me", "model": "second"})
        b = c.post("/v1/embeddings", json={"input": "route me"})  # no model: the first one
        assert a.status_code == b.status_code == 200
        assert (a.json()["model"], b.json()["model"]) == ("second", "first")
        np.testing.assert_allclose(a.json()["data"][0]["embedding"], b.json()["data"][0]["embedding"], atol=1e-5)
        missing = c.post("/v1/embeddings", json={"input": "x", "model": "third"})
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found" and missing.json()["error"]["param"] == "model"
        ready = c.get("/health/ready").json()
        assert ready["status"] == "ready" and set(ready["models"]) == {"first", "second"}
        metrics = c.get("/metrics").text
        stats = c.get("/stats").json()
    for name in ("first", "second"):
        assert f'openhood_batches_total{{model="{name}",outcome="ok"}}' in metrics
        assert f'openhood_queue_depth{{model="{name}"}}' in metrics
        assert stats["models"][name]["buckets"] == [32, 256]  # its own queue and buckets
    starts = [e for e in two_models.log_lines() if "resident memory added" in e.get("message", "")]
    assert len(starts) == 2  # each model's memory is reported at start
    lines = [e for e in two_models.log_lines() if e.get("route") == "/v1/embeddings" and e.get("status") == 200]
    assert {e["model"] for e in lines} == {"first", "second"}
