"""A real server with the test-only fault injection on: readiness 503, wedge detection, 429,
an engine exception failing only its batch, and a client that disconnects while queued."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from .conftest import ServerProcess

POISON_TOKENS = 77  # embed() raises for a batch holding a sequence of exactly this many tokens
SLEEP_S = 0.6  # every embed() call sleeps this long first


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    srv = ServerProcess(
        tmp_path_factory.mktemp("faulty") / "server.log",
        # One worker: these tests hold *the* worker with a slow batch and watch what queues behind it.
        "--workers",
        "1",
        "--max-queue",
        "3",
        "--max-batch-size",
        "1",
        "--stall-timeout",
        "0.15",
        "--health-timeout",
        "3",
        env={"OPENHOOD_FAULT_INJECT": f"health,embed_len={POISON_TOKENS},embed_sleep={SLEEP_S}"},
        wait_ready=False,  # it never becomes ready: that is the point
    )
    yield srv
    assert srv.stop() == 0


def poison_text() -> str:
    return "hello " * (POISON_TOKENS - 2)  # "hello" is one WordPiece token; + [CLS] and [SEP]


def test_readiness_is_503_when_the_engine_fails_and_live_stays_200(faulty):
    with faulty.client() as c:
        assert c.get("/health/live").status_code == 200
        resp = c.get("/health/ready")
        assert resp.status_code == 503
        body = resp.json()
        assert body["status"] == "not_ready" and "InjectedFault" in body["reason"]
        assert {"queue_depth", "in_flight", "rss_bytes"} <= set(body)


def test_readiness_reports_a_wedged_worker(faulty):
    seen = []
    with faulty.client() as c:
        t = threading.Thread(
            target=lambda: seen.append(c.post("/v1/embeddings", json={"input": "slow one"}).status_code)
        )
        t.start()
        reasons = []
        while t.is_alive():
            reasons.append(c.get("/health/ready").json()["reason"])
            time.sleep(0.03)
        t.join()
    assert seen == [200]
    assert any("inside one batch" in r for r in reasons), reasons


def test_overload_gets_429_with_retry_after(faulty):
    results = []
    lock = threading.Lock()

    def send(i):
        with faulty.client() as c:
            r = c.post("/v1/embeddings", json={"input": f"overload {i}"})
            with lock:
                results.append(r)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(10)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    codes = sorted(r.status_code for r in results)
    assert codes.count(200) >= 1 and codes.count(429) >= 1 and set(codes) <= {200, 429}, codes
    for r in results:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == "queue_full"


def test_engine_exception_fails_only_its_batch_and_server_keeps_serving(faulty):
    out = {}

    def send(key, text):
        with faulty.client() as c:
            out[key] = c.post("/v1/embeddings", json={"input": text})

    threads = [
        threading.Thread(target=send, args=("poison", poison_text())),
        threading.Thread(target=send, args=("ok", "fine")),
    ]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert out["poison"].status_code == 500 and out["poison"].json()["error"]["code"] == "inference_failed"
    assert out["ok"].status_code == 200
    with faulty.client() as c:
        assert c.post("/v1/embeddings", json={"input": "after the failure"}).status_code == 200
        assert (
            'openhood_batches_total{model="sentence-transformers/all-MiniLM-L6-v2",outcome="error"} 1.0'
            in c.get("/metrics").text
        )


def test_disconnected_client_is_dropped_before_inference(faulty):
    with faulty.client() as c:
        before = c.get("/metrics").text
        blocker = threading.Thread(target=lambda: c.post("/v1/embeddings", json={"input": "occupy the worker"}))
        blocker.start()
        time.sleep(0.1)
        body = b'{"input": "nobody waits for me"}'
        with socket.create_connection(("127.0.0.1", faulty.port), timeout=5) as s:
            s.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + b"X-Request-ID: gone-away\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            time.sleep(0.2)  # queued behind the blocker
        blocker.join(30)
        time.sleep(SLEEP_S + 0.3)
        after = c.get("/metrics").text

    def dropped(text):
        for line in text.splitlines():
            if line.startswith("openhood_dropped_sequences_total{"):
                return float(line.split()[1])
        return 0.0

    assert dropped(after) - dropped(before) == 1
    line = next(e for e in faulty.log_lines() if e.get("request_id") == "gone-away")
    assert line["status"] == 499 and line["disconnected"] is True
