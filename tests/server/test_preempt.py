"""Layer-granular preemption on the real server (NumPy backend, one worker, every layer slowed
by ``step_sleep`` so the long batch is still running when the short one arrives): the short
request preempts the long one, its output is bit-identical to an uninterrupted run, /stats,
/metrics and its log line give the yield and the preempted time, and SIGTERM while it is
suspended drains it."""

from __future__ import annotations

import signal
import threading
import time

from .conftest import ServerProcess

GRACE_S = 30
LONG = "preemption " * 150  # ~150 tokens: the 160 bucket
SHORT = "a short one"


def race(srv: ServerProcess, while_suspended=None) -> dict[str, tuple[int, list[float] | None]]:
    """The long request, then the short one while it runs; ``while_suspended()`` once /stats
    shows the long batch suspended (the short one is then running: both are admitted). Each
    request's (status, embedding)."""
    results: dict[str, tuple[int, list[float] | None]] = {}

    def post(key: str, text: str) -> None:
        with srv.client() as c:
            r = c.post("/v1/embeddings", json={"input": text})
            results[key] = (r.status_code, r.json()["data"][0]["embedding"] if r.status_code == 200 else None)

    threads = [threading.Thread(target=post, args=("long", LONG))]
    threads[0].start()
    with srv.client() as c:
        deadline = time.monotonic() + 60
        while c.get("/stats").json()["in_flight"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # one layer in: the long batch is running
        threads.append(threading.Thread(target=post, args=("short", SHORT)))
        threads[1].start()
        while c.get("/stats").json()["preemption"]["suspended"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.get("/stats").json()["preemption"]["suspended"] == 1  # the long batch, for the short one
    if while_suspended is not None:
        while_suspended()
    [t.join(60) for t in threads]
    assert {k: v[0] for k, v in results.items()} == {"long": 200, "short": 200}
    return results


def test_short_requests_preempt_a_long_batch_and_sigterm_drains_it(tmp_path):
    srv = ServerProcess(
        tmp_path / "server.log",
        "--backend",
        "numpy",  # preemption is the NumPy engine's (ONNX Runtime cannot stop between layers)
        "--workers",
        "1",
        "--no-wide",
        # The ageing deadline is max(--max-age-ms, 3 x a batch's calibrated work): the calibration
        # times the real (fast) layers, while step_sleep makes each take 0.5 s, so with the default
        # 100 ms the long batch is overdue (never preempted) before the short one arrives.
        "--max-age-ms",
        "20000",
        "--grace-period",
        str(GRACE_S),
        env={"OPENHOOD_FAULT_INJECT": "step_sleep=0.5"},  # 6 layers: a pass lasts >= 3 s
    )
    try:
        with srv.client() as c:
            alone = c.post("/v1/embeddings", json={"input": LONG}).json()["data"][0]["embedding"]
            assert c.get("/stats").json()["preemption"] == {
                "enabled": True,
                "suspended": 0,
                "yields": 0,
                "preempted_batches": 0,
            }
        assert race(srv)["long"][1] == alone  # preempted and resumed: the same bits as uninterrupted
        with srv.client() as c:
            stats = c.get("/stats").json()
            assert stats["preemption"]["yields"] >= 1 and stats["preemption"]["preempted_batches"] == 1
            assert stats["preemption"]["suspended"] == 0
            assert stats["by_length"]["129-256"]["preempted"]["p50_ms"] > 0
            assert stats["by_length"]["0-32"]["preempted"]["p99_ms"] == 0  # the short one never waited suspended
            metrics = c.get("/metrics").text
            assert any(
                line.startswith("openhood_preemptions_total{") and float(line.split()[-1]) >= 1
                for line in metrics.splitlines()
            )
        yielded = [e for e in srv.log_lines() if e.get("yields")]  # the long request's line
        assert len(yielded) == 1 and yielded[0]["preempted_ms"] > 0 and yielded[0]["tokens"] > 100

        t_signal = [0.0]

        def sigterm() -> None:
            t_signal[0] = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)

        assert race(srv, while_suspended=sigterm)["long"][1] == alone
        assert srv.proc.wait(GRACE_S + 10) == 0 and time.monotonic() - t_signal[0] < GRACE_S
    finally:
        srv.stop()
