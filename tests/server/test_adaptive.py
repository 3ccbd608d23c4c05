"""Adaptive parallelism and the calibrated token budget, on the shared real server (2 x 1-thread workers)."""

import time
import uuid

import pytest

from openhood.engine.kernels.cores import available_cores


def logged(server, event: str) -> dict:
    return next(e for e in server.log_lines() if e.get("event") == event)


def request_line(server, rid: str) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the access line is written right after the response
        mine = [e for e in server.log_lines() if e.get("request_id") == rid and e.get("event") == "request"]
        if mine:
            return mine[0]
        time.sleep(0.05)
    raise AssertionError(f"no access log line for {rid}")


@pytest.mark.skipif(available_cores() < 2, reason="the wide engine exists only where workers' engines leave cores idle")
def test_a_lone_request_runs_on_the_all_cores_engine(server, client):
    layout = logged(server, "cpu_layout")
    assert layout["engine_threads"] == 1 and layout["workers"] == 2
    assert layout["wide_threads"] == layout["cores"] == available_cores()
    before = wide_batches(client)
    rid = f"lone-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/embeddings", json={"input": "one request on an idle server"}, headers={"X-Request-Id": rid})
    assert r.status_code == 200
    assert request_line(server, rid)["wide"] is True
    assert wide_batches(client) == before + 1


def test_token_budgets_are_calibrated_per_bucket_at_start_up(server, client):
    budget = logged(server, "token_budget")
    us = budget["us_per_token"]
    assert set(us) == set(budget["budgets"]) == {"48", "80", "160", "256"} and all(v > 0 for v in us.values())
    # each bucket's budget holds one of its items and never exceeds the surge budget
    assert all(int(t) <= b <= budget["surge_budget"] for t, b in budget["budgets"].items())
    assert budget["calibration_s"] < 30  # a few hundred ms on a quiet machine; bounded on a loaded one
    assert client.get("/info").json()["max_batch_tokens"] == budget["surge_budget"]


def wide_batches(client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("openhood_wide_batches_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
