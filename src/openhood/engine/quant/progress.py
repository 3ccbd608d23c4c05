"""A one-line progress indicator on stderr (``label [#####.....] 12/40``), redrawn in place.

No dependency (tqdm) for one line of output; it writes nothing when stderr is not a terminal
unless ``always=True``, so logs and tests are not flooded with carriage returns.
"""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, label: str, total: int, width: int = 30, always: bool = False) -> None:
        self.label, self.total, self.width = label, max(total, 1), width
        self.enabled = always or sys.stderr.isatty()

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        total = total or self.total
        filled = int(self.width * done / max(total, 1))
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}{end}")
        sys.stderr.flush()
