"""Long soaks survive a slow sample (counted as missed) and Ctrl-C (stops early, still reports)."""

import _thread
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openhood.soak import runner
from openhood.soak.runner import SoakConfig, run_soak

MEMORY = {
    "process": {"rss_bytes": 1, "uss_bytes": 1, "fds": 1, "threads": 1},
    "tracemalloc": None,
    "gc": {"objects": 1, "top_types": [], "growing_types": [], "shrinking_types": [], "collections": [0, 0, 0]},
}


class Handler(BaseHTTPRequestHandler):
    memory_calls = 0
    posts = 0
    interrupt_at_post: int | None = None  # send Ctrl-C to the soak (the main thread) at this request

    def log_message(self, *args):  # quiet test output
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/debug/memory"):
            Handler.memory_calls += 1
            if Handler.memory_calls == 3:  # one slow sample mid-run
                time.sleep(1.0)
            self._send(200, MEMORY)
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": "m", "task": "embed", "max_length": 8}]})
        else:
            self._send(200, {"status": "ready"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        Handler.posts += 1
        if Handler.posts == Handler.interrupt_at_post:
            _thread.interrupt_main()
        time.sleep(0.02)
        self._send(200, {"data": []})


def soak(seconds: float, interrupt_at_post: int | None = None) -> runner.SoakRun:
    Handler.memory_calls = Handler.posts = 0
    Handler.interrupt_at_post = interrupt_at_post
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = SoakConfig(
            base_url=f"http://127.0.0.1:{server.server_address[1]}",
            seconds=seconds,
            concurrency=2,
            sample_every_s=0.2,
            timeout_s=0.3,
        )
        return run_soak(cfg)
    finally:
        server.shutdown()


def test_a_timed_out_sample_is_missed_not_fatal(monkeypatch):
    monkeypatch.setattr(runner, "SAMPLE_TIMEOUT_S", 0.3)
    run = soak(3.0)
    assert run.missed_samples == 1 and not run.stopped_early
    assert len(run.samples) >= 3 and run.sent >= 2
    assert run.samples[-1]["requests"] == run.sent  # the closing sample came after the slow one


def test_sigint_stops_the_soak_early_and_keeps_its_samples():
    # interrupt_main does nothing while SIGINT is ignored (a shell's background job inherits it
    # so): run with Python's own handler, the state an interactive Ctrl-C meets.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        t0 = time.monotonic()
        run = soak(120.0, interrupt_at_post=5)
        assert time.monotonic() - t0 < 60
    finally:
        signal.signal(signal.SIGINT, previous)
    assert run.stopped_early and run.sent >= 5 and len(run.samples) >= 2
    assert run.samples[-1]["requests"] == run.sent  # the closing sample came after the last request
