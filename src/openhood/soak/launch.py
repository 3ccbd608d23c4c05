"""Start an ``openhood serve --debug-endpoints`` process of the soak's own, on a free loopback port.

A subprocess, not an in-process app: the soak must measure the server's memory, not its own,
and must stay on the HTTP side of the layers. Its log goes to a file in the report folder. The
trade-off: start-up (model load and warm-up) is paid before the soak begins.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LaunchedServer:
    def __init__(
        self, models: list[str], log_path: Path, extra_args: list[str] | None = None, debug_endpoints: bool = True
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115 -- the server writes it until stop() closes it
        args = [
            sys.executable,
            "-m",
            "openhood.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *(["--debug-endpoints"] if debug_endpoints else []),  # tracemalloc: costs CPU on every request
        ]
        for m in models:
            args += ["--model", m]
        self.proc = subprocess.Popen([*args, *(extra_args or [])], stdout=self._log, stderr=subprocess.STDOUT)

    def __enter__(self) -> LaunchedServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode
