"""Graceful drain on SIGTERM/SIGINT, around uvicorn's server loop.

Uvicorn's own handler sets ``should_exit`` on the first signal: it closes the listening sockets
and waits for open connections — but requests still waiting in our queue, and a load balancer
that has not yet seen readiness fail, get no say. And after a signal, uvicorn re-raises it once
the loop ends, so the process dies *by* the signal instead of exiting 0. ``DrainingServer``
replaces both: the first signal flips ``Lifecycle.draining`` (readiness → 503 and new /v1
requests → 503 at once, connections still accepted so callers get a clean answer, not a reset),
then waits for every in-flight request (queued ones included) to finish, stops the worker, and
only then sets ``should_exit``; uvicorn closes the sockets and the process returns 0. All of it
is bounded by the grace period; a second SIGINT forces the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

import uvicorn

log = logging.getLogger("openhood.server")


class Lifecycle:
    """Shared by the middleware (counts /v1 requests) and the server (decides when to exit)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.drain_started: float | None = None

    def begin_drain(self) -> None:
        if not self.draining:
            self.draining = True
            self.drain_started = time.monotonic()


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, grace_period_s: float, stop_worker):
        super().__init__(config)
        self.lifecycle = lifecycle
        self.grace_period_s = grace_period_s
        self._stop_worker = stop_worker  # (timeout_s) -> bool, called once nothing is in flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        with self._capture_signals():
            await self._serve(sockets)

    @contextlib.contextmanager
    def _capture_signals(self):
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        # Unlike uvicorn, no re-raise: a drained server has done what the signal asked; exit 0.

    def handle_exit(self, sig, frame) -> None:
        if self.lifecycle.draining:
            if sig == signal.SIGINT:
                log.warning("second SIGINT: exiting without waiting for in-flight requests")
                self.force_exit = True
                self.should_exit = True
            return
        self.lifecycle.begin_drain()
        log.info("received %s: draining (grace period %.0f s)", signal.Signals(sig).name, self.grace_period_s)
        if self._loop is None:  # signal before the loop started: nothing in flight
            self.should_exit = True
            return
        # Signal handlers run between bytecodes of the loop's thread; schedule, don't await.
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.grace_period_s
        while self.lifecycle.in_flight > 0 and time.monotonic() < deadline and not self.force_exit:
            await asyncio.sleep(0.02)
        left = self.lifecycle.in_flight
        if left:
            log.error("grace period over with %d request(s) still in flight", left)
        # Joining the worker blocks: do it off the loop so late responses still go out.
        stopped = await asyncio.to_thread(self._stop_worker, max(0.1, deadline - time.monotonic()))
        if not stopped:
            log.error("the inference worker did not stop within the grace period")
        # What is left of the grace period bounds uvicorn's own wait for open connections.
        self.config.timeout_graceful_shutdown = max(0.5, deadline - time.monotonic())  # type: ignore[assignment]  # uvicorn takes seconds as a float
        log.info("drained in %.2f s; shutting down", time.monotonic() - (self.lifecycle.drain_started or deadline))
        self.should_exit = True
