"""A live progress line on stderr while a load test runs.

Shows elapsed time, requests sent / done / failed, in flight, and P50/P99 over the last
window, so a collapsing server (in-flight growing, P99 climbing) is visible before the report.
Drawn on the shared ``StatusLine``: on a terminal one line redrawn in place, into a file or pipe
a line every few seconds, so logs stay readable. The trade-off: window percentiles are computed from the
latencies of the last tick only (cheap, noisy at low rates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from openhood.progress import StatusLine


class ProgressLine:
    def __init__(self, stream, interval_s: float = 0.5):
        self.status = StatusLine(stream, tty_interval=interval_s)
        self.interval = self.status.interval or interval_s
        self._window: list[float] = []
        self.done = 0
        self.errors = 0
        self._poll: Callable[[], tuple[int, float]] = lambda: (0, 0.0)  # start() sets the real one
        self._label = ""
        self._total = 0.0

    def start(self, cfg, poll) -> None:
        """``poll()`` returns (requests sent so far, seconds since start)."""
        self._poll = poll
        self._total = cfg.warmup + cfg.duration
        self._label = f"open {cfg.rate:g}/s" if cfg.mode == "open" else f"closed x{cfg.concurrency}"

    def observe(self, latency_s: float, ok: bool) -> None:
        self.done += 1
        self.errors += not ok
        self._window.append(latency_s)

    def line(self) -> str:
        sent, elapsed = self._poll()
        window, self._window = self._window, []
        if window:
            p50, p99 = np.percentile(np.asarray(window) * 1e3, [50, 99])
            lat = f"p50 {p50:6.1f}ms p99 {p99:6.1f}ms"
        else:
            lat = "p50      - p99      -"
        return (
            f"[{self._label}] {min(elapsed, self._total):5.1f}/{self._total:g}s sent {sent} "
            f"done {self.done} err {self.errors} in-flight {sent - self.done} {lat}"
        )

    def emit(self) -> None:
        self.status.update(self.line(), force=True)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.emit()

    def finish(self) -> None:
        self.status.close(self.line())
