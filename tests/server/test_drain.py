"""SIGTERM with concurrent clients: readiness and new requests → 503 at once, every request in
flight at the signal still gets its 200, then the process exits 0 within the grace period."""

from __future__ import annotations

import signal
import threading
import time

from .conftest import ServerProcess

GRACE_S = 30


def test_sigterm_drains_in_flight_work_and_exits_zero(tmp_path):
    srv = ServerProcess(
        tmp_path / "server.log",
        "--max-batch-size",
        "2",
        "--grace-period",
        str(GRACE_S),
        env={"OPENHOOD_FAULT_INJECT": "embed_sleep=0.5"},  # keeps work in flight at the signal
    )
    try:
        results: list[int] = []
        lock = threading.Lock()

        start = threading.Barrier(8)

        def client(i):
            with srv.client() as c:
                c.get("/health/live")  # connected before the race starts
                start.wait(30)
                r = c.post("/v1/embeddings", json={"input": [f"drain test {i} a", f"drain test {i} b"]})
                with lock:
                    results.append(r.status_code)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        with srv.client() as c:
            deadline = time.monotonic() + 30
            while c.get("/stats").json()["in_flight"] < 8 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert c.get("/stats").json()["in_flight"] == 8
            t_signal = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            while c.get("/health/ready").status_code != 503:
                assert time.monotonic() - t_signal < 5
                time.sleep(0.01)
            ready = c.get("/health/ready").json()
            assert "draining" in ready["reason"] and ready["in_flight"] > 0  # still working
            late = c.post("/v1/embeddings", json={"input": "too late"})
            assert late.status_code == 503 and late.json()["error"]["code"] == "draining"
        [t.join(60) for t in threads]
        assert results == [200] * 8
        code = srv.proc.wait(GRACE_S + 10)
        assert code == 0 and time.monotonic() - t_signal < GRACE_S
        assert any("drained" in e.get("message", "") for e in srv.log_lines())
    finally:
        srv.stop()
