"""``StatusLine``: the one progress line every long command draws on stderr.

On a terminal it redraws one line in place (``\\r`` + erase) at most every ``tty_interval``
seconds; into a file or a pipe it prints a whole line every ``log_interval`` seconds (or not at
all with ``log_interval=None``), so logs stay readable and tests are not flooded with carriage
returns. Callers format their own text (rows/s, ETA, P99, RSS) and may use ``bar`` for the
``[#####     ]`` part; the line writes lengths and counts only, never request text. The
trade-off: one small class instead of a dependency (``tqdm``/``rich``): importing it costs
nothing, where ``rich`` alone takes tens of milliseconds of every command's start-up.

>>> bar(0.5, width=10)
'[#####     ]'
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def bar(fraction: float, width: int = 30, fill: str = "#") -> str:
    """A fixed-width bar for ``fraction`` (clipped to [0, 1])."""
    filled = int(width * min(max(fraction, 0.0), 1.0))
    return f"[{fill * filled}{' ' * (width - filled)}]"


class StatusLine:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty_interval: float = 0.2,
        log_interval: float | None = 5.0,
        enabled: bool = True,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = tty_interval if self.tty else log_interval
        self.enabled = enabled and self.interval is not None
        self.drawn = False
        self._last = -float("inf")

    def update(self, text: str, force: bool = False) -> None:
        """Show ``text`` now if the last line is old enough (or ``force``)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        assert self.interval is not None
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self.stream.write(("\r\x1b[2K" + text) if self.tty else (text + "\n"))
        self.stream.flush()
        self.drawn = True

    def close(self, text: str | None = None) -> None:
        """The last state (``text``, if given) and, on a terminal, the line break after it."""
        if text is not None:
            self.update(text, force=True)
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
