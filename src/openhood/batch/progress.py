"""The progress line of a batch job: a bar, rows done of the total, rows/s and the ETA.

Drawn on the shared ``StatusLine``: on a terminal one line redrawn at most every 0.2 s, into a
file or a pipe a line every 5 s, so logs stay readable. Rows of shards finished by an earlier (killed) run
count as done but not towards the rate, so a resumed job's ETA is not flattered by them.
"""

from __future__ import annotations

import time

from openhood.progress import StatusLine, bar


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    def __init__(self, total_rows: int, stream, already_done: int = 0, width: int = 30):
        self.total = max(total_rows, 1)
        self.done = already_done
        self._resumed = already_done
        self.status = StatusLine(stream)
        self.width = width
        self.start = time.perf_counter()

    def rate(self) -> float:
        """Rows per second computed in this run."""
        return (self.done - self._resumed) / max(time.perf_counter() - self.start, 1e-9)

    def line(self) -> str:
        frac = min(self.done / self.total, 1.0)
        rate = self.rate()
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "-:--:--"
        return f"{bar(frac, self.width)} {frac:6.1%} {self.done}/{self.total} rows {rate:,.0f} rows/s ETA {eta}"

    def advance(self, rows: int) -> None:
        self.done += rows
        self.status.update(self.line())

    def finish(self) -> None:
        self.status.close(self.line())
