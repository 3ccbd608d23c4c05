"""Real `openhood serve` processes on 127.0.0.1 for the server tests.

Each ``ServerProcess`` is the real CLI in a subprocess (real uvicorn, real signals, real model),
its JSON-lines stderr captured to a file the tests read. Fixtures start as few processes as
possible: one ordinary server (with an API key) shared by the whole session, and dedicated ones
only where a test breaks the server on purpose (fault injection, SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

API_KEY = "test-key-123"
STARTUP_TIMEOUT_S = 180  # model load on busy shared cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, log_path: Path, *args: str, env: dict[str, str] | None = None, wait_ready: bool = True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 -- the server writes it until stop() closes it
        full_env = {**os.environ, **(env or {})}
        full_env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openhood.cli", "serve", "--port", str(self.port), *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
        self._wait(ready=wait_ready)

    def _wait(self, ready: bool) -> None:
        path = "/health/ready" if ready else "/health/live"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        with httpx.Client(timeout=httpx.Timeout(10.0, connect=1.0)) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
                try:
                    if client.get(self.url + path).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not up within {STARTUP_TIMEOUT_S} s:\n{self.log_text()[-3000:]}")

    def client(self, **kw) -> httpx.Client:
        kw.setdefault("timeout", httpx.Timeout(60.0, connect=3.05))
        kw.setdefault("limits", httpx.Limits(max_connections=32, max_keepalive_connections=8))
        return httpx.Client(base_url=self.url, **kw)

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict]:
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"unparsed": line})
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The ordinary server every non-destructive test shares (Bearer auth on)."""
    srv = ServerProcess(
        tmp_path_factory.mktemp("server") / "server.log",
        "--api-key",
        API_KEY,
        "--max-inputs-per-request",
        "64",
        "--max-body-bytes",
        "65536",
        "--workers",
        "2",
        "--threads",
        "1",  # two workers, each its own 1-thread engine: every API test runs on both
    )
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="session")
def client(server):
    with server.client(headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


@pytest.fixture(scope="session")
def embedder():
    from openhood import Embedder

    return Embedder.from_pretrained()
