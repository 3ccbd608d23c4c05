"""The quantizer's progress line (``label [#####.....] 12/40``), on the shared ``StatusLine``.

Written only on a terminal unless ``always=True``, so logs and tests are not flooded.
"""

from __future__ import annotations

from openhood.progress import StatusLine, bar


class Progress:
    def __init__(self, label: str, total: int, width: int = 30, always: bool = False) -> None:
        self.label, self.total, self.width = label, max(total, 1), width
        self.line = StatusLine(tty_interval=0.0, log_interval=0.0 if always else None)

    def __call__(self, done: int, total: int | None = None) -> None:
        total = total or self.total
        text = f"{self.label} {bar(done / max(total, 1), self.width)} {done}/{total}"
        if done >= total:
            self.line.close(text)
        else:
            self.line.update(text)
