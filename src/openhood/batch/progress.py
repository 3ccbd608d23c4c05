"""The progress line of a batch job: a bar, rows done of the total, rows/s and the ETA.

On a terminal one line is redrawn (``\\r``) at most every 0.2 s; into a file or a pipe a line
is printed every 5 s, so logs stay readable. Rows of shards finished by an earlier (killed) run
count as done but not towards the rate, so a resumed job's ETA is not flattered by them.
"""

from __future__ import annotations

import time


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    def __init__(self, total_rows: int, stream, already_done: int = 0, width: int = 30):
        self.total = max(total_rows, 1)
        self.done = already_done
        self._resumed = already_done
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval = 0.2 if self.tty else 5.0
        self.width = width
        self.start = self._last = time.perf_counter()

    def rate(self) -> float:
        """Rows per second computed in this run."""
        return (self.done - self._resumed) / max(time.perf_counter() - self.start, 1e-9)

    def line(self) -> str:
        frac = min(self.done / self.total, 1.0)
        rate = self.rate()
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "-:--:--"
        bar = "#" * int(frac * self.width)
        return f"[{bar:<{self.width}}] {frac:6.1%} {self.done}/{self.total} rows {rate:,.0f} rows/s ETA {eta}"

    def advance(self, rows: int) -> None:
        self.done += rows
        now = time.perf_counter()
        if now - self._last >= self.interval:
            self._last = now
            self._emit()

    def finish(self) -> None:
        self._emit()
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _emit(self) -> None:
        self.stream.write(("\r\x1b[2K" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
        self.stream.flush()
