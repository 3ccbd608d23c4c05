"""``Scheduler``: what the server needs of any model's scheduler, whatever its kind.

Two schedulers exist: the dynamic batcher (``scheduler.batcher``: single-pass tasks, batches
formed once per call) and the step scheduler (``scheduler.generation``: ``generate``, sequences
joining and leaving a running batch every step). Start-up, readiness, ``/stats`` and the drain
only start, probe, watch and stop them, and this protocol is that common part; submitting work
stays each scheduler's own, typed call (items vs. a sequence with a sink). The trade-off: the
server keeps one runtime class per scheduler kind for ``submit``, with no casts between them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol


class Scheduler(Protocol):
    @property
    def workers(self) -> int:
        """Threads running the model (the step scheduler: 1)."""
        ...

    @property
    def queue_depth(self) -> int:
        """Items (batcher) or sequences (step scheduler) waiting to start."""
        ...

    @property
    def worker_alive(self) -> bool: ...

    def busy_for_s(self) -> float:
        """Seconds the longest-busy worker has been inside its current batch or step (0 idle)."""
        ...

    def run_exclusive(self, fn: Callable[[], object], worker: int = 0) -> Future[object]:
        """Run ``fn`` on worker ``worker``'s thread between two batches or steps."""
        ...

    def start(self) -> None: ...

    def stop(self, timeout: float | None = None) -> bool:
        """Take no new work, finish what was taken, join the threads; True when all ended."""
        ...
