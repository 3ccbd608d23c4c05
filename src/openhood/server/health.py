"""Readiness that means something: a tiny real inference, on the real worker, with a deadline.

``/health/ready`` is 200 only if (1) the server is not draining and, for every served model,
(2) its worker threads are alive and not stuck inside one batch for longer than
``stall_timeout_s``, and (3) a probe — a real one-item inference through the model's whole
path, checked against what the model says a healthy output looks like (``ServedModel.probe``:
shape, finite, unit norm only when the model normalizes) — ran on a worker thread and came back
within ``health_timeout_s``; with several workers the probe goes to each in turn. Running the
probe on the worker (between batches) means the engine is never called from two threads, and a
wedged worker cannot answer: readiness then fails by timeout instead of hanging. Concurrent
probes share one in-flight probe, so a wedged worker never accumulates probe jobs, and a probe
that passed less than a second ago is reused (the stall check still runs every time).
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import Future
from typing import Any, Protocol

from openhood.scheduler import Scheduler

POLL_S = 0.05  # how often a waiting readiness check re-checks for a stalled worker
PROBE_REUSE_S = 1.0  # a passing probe younger than this answers readiness without a new inference


class ProbedModel(Protocol):
    """What readiness needs of a served model (``ServedModel``, ``ServedGenerator``)."""

    @property
    def workers(self) -> int: ...

    def probe(self, worker: int) -> dict[str, Any]: ...


class ReadinessProbe:
    def __init__(self, scheduler: Scheduler, model: ProbedModel, *, timeout_s: float, stall_timeout_s: float):
        self.scheduler = scheduler
        self.model = model
        self._next_worker = 0
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._pending: Future[Any] | None = None
        self._last_ok: tuple[float, dict[str, Any]] | None = None  # (monotonic time, details) of the last passing probe

    async def check(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details). Never waits longer than ``timeout_s``."""
        if not self.scheduler.worker_alive:
            return False, {"reason": "the inference worker thread is not running"}
        busy = self.scheduler.busy_for_s()
        if busy > self.stall_timeout_s:
            return False, {"reason": f"the inference worker has been inside one batch for {busy:.1f} s"}
        if self._last_ok is not None and time.monotonic() - self._last_ok[0] < PROBE_REUSE_S:
            return True, {**self._last_ok[1], "cached": True}  # many probers must not tax the worker
        if self._pending is None or self._pending.done():
            # Workers take turns, so every engine gets probed as readiness is polled.
            worker, self._next_worker = self._next_worker, (self._next_worker + 1) % self.model.workers
            self._pending = self.scheduler.run_exclusive(functools.partial(self.model.probe, worker), worker=worker)
        probe = asyncio.wrap_future(self._pending)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                # shield: a waiter that gives up must not cancel the probe other waiters share.
                details = await asyncio.wait_for(
                    asyncio.shield(probe), min(POLL_S, max(0.0, deadline - time.monotonic()))
                )
                self._last_ok = (time.monotonic(), details)
                return True, details
            except TimeoutError:
                # The probe queues behind the running batch; a stuck batch must not hide behind it.
                busy = self.scheduler.busy_for_s()
                if busy > self.stall_timeout_s:
                    return False, {"reason": f"the inference worker has been inside one batch for {busy:.1f} s"}
                if time.monotonic() >= deadline:
                    return False, {"reason": f"the readiness probe did not finish within {self.timeout_s:g} s"}
            except Exception as exc:  # the engine failed the probe: report its kind, never crash the route
                return False, {"reason": f"readiness probe failed: {type(exc).__name__}: {exc}"}
