"""Graceful drain on SIGTERM/SIGINT, around uvicorn's server loop.

Uvicorn's own handler sets ``should_exit`` on the first signal: it closes the listening sockets
and waits for open connections — but requests still waiting in our queue, and a load balancer
that has not yet seen readiness fail, get no say. And after a signal, uvicorn re-raises it once
the loop ends, so the process dies *by* the signal instead of exiting 0. ``DrainingServer``
replaces both: the first signal flips ``Lifecycle.draining`` (readiness → 503 and new /v1
requests → 503 at once, connections still accepted so callers get a clean answer, not a reset),
then waits for every in-flight request (queued ones included) to finish, stops the worker, and
only then sets ``should_exit``; uvicorn closes the sockets and the process returns 0. All of it
is bounded by the grace period. A request still waiting when the grace period runs out is
answered 503 + ``Retry-After`` (``Lifecycle.cut``; counted and logged), never cut off bare. A
second SIGINT or SIGTERM exits at once (``os._exit``) after one log line saying so: the operator
asked twice, and nothing the process could still do is worth more than obeying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

log = logging.getLogger("openhood.server")


class Lifecycle:
    """Shared by the middleware (counts /v1 requests) and the server (decides when to exit)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.drain_started: float | None = None
        # Set when the grace period runs out: handlers still waiting answer 503 + Retry-After.
        self.cut = asyncio.Event()
        self._cut_future: asyncio.Future[None] | None = None

    def cut_waiter(self) -> asyncio.Future[None]:
        """One future every waiting handler can ``asyncio.wait`` on, done when ``cut`` is set
        (instead of one ``cut.wait()`` task per request)."""
        if self._cut_future is None:
            self._cut_future = asyncio.get_running_loop().create_future()
            if self.cut.is_set():
                self._cut_future.set_result(None)
        return self._cut_future

    def set_cut(self) -> None:
        self.cut.set()
        if self._cut_future is not None and not self._cut_future.done():
            self._cut_future.set_result(None)

    def begin_drain(self) -> None:
        if not self.draining:
            self.draining = True
            self.drain_started = time.monotonic()


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        lifecycle: Lifecycle,
        grace_period_s: float,
        stop_worker: Callable[[float], bool],
        cut_lead_s: float | None = None,
    ):
        super().__init__(config)
        self.lifecycle = lifecycle
        self.grace_period_s = grace_period_s
        # How long before the deadline waiting requests are cut: time for their answers to go out
        # (a generation step and its last chunks need more than a queued embedding's 503).
        self.cut_lead_s = min(1.0, grace_period_s / 10) if cut_lead_s is None else min(cut_lead_s, grace_period_s)
        self._stop_worker = stop_worker  # (timeout_s) -> bool, called once nothing is in flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        with self._capture_signals():
            await self._serve(sockets)

    @contextlib.contextmanager
    def _capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        # Unlike uvicorn, no re-raise: a drained server has done what the signal asked; exit 0.

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.lifecycle.draining:
            log.warning(
                "second %s: exiting now without waiting for %d in-flight request(s)",
                signal.Signals(sig).name,
                self.lifecycle.in_flight,
            )
            os._exit(128 + sig)
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
        # Keep a moment at the end for the 503s of requests cut at the deadline to go out.
        cut_at = deadline - self.cut_lead_s
        while self.lifecycle.in_flight > 0 and time.monotonic() < cut_at and not self.force_exit:
            await asyncio.sleep(0.02)
        left = self.lifecycle.in_flight
        if left:
            # A request whose response has not started gets 503; a stream already under way
            # cannot change its status: its sequence was cut (finish_reason "length") and it ends.
            log.error(
                "grace period over with %d request(s) still in flight: cutting them (503 unless "
                "their response already started)",
                left,
            )
            self.lifecycle.set_cut()
            while self.lifecycle.in_flight > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        # Joining the worker blocks: do it off the loop so late responses still go out.
        stopped = await asyncio.to_thread(self._stop_worker, max(0.1, deadline - time.monotonic()))
        if not stopped:
            log.error("the inference worker did not stop within the grace period")
        # What is left of the grace period bounds uvicorn's own wait for open connections.
        self.config.timeout_graceful_shutdown = max(0.5, deadline - time.monotonic())  # type: ignore[assignment]  # uvicorn takes seconds as a float
        log.info("drained in %.2f s; shutting down", time.monotonic() - (self.lifecycle.drain_started or deadline))
        self.should_exit = True


def worst_case_drain_s(max_queue: int, rows_per_batch: int, batch_s: float, workers: int) -> float:
    """Seconds to empty a full queue: ``max_queue`` sequences in batches of ``rows_per_batch``
    at the measured ``batch_s`` each (longest bucket), spread over ``workers``."""
    return math.ceil(max_queue / max(1, rows_per_batch)) * batch_s / max(1, workers)


# The share of the grace period a full queue may take to drain; the rest is room for the
# in-flight batches, the last responses and uvicorn's own shutdown.
DRAIN_SHARE = 0.8


def queue_token_cap(grace_period_s: float, tokens_per_s: float, models: int) -> int | None:
    """Queued tokens per model that drain within ``DRAIN_SHARE`` of the grace period when the
    ``models`` share the cores; None when there is no grace period to fit (0: drain disabled).

    >>> queue_token_cap(30.0, 1000.0, 2)
    12000
    """
    if grace_period_s <= 0 or tokens_per_s <= 0:
        return None
    return max(1, int(grace_period_s * DRAIN_SHARE / max(1, models) * tokens_per_s))


def check_grace(grace_period_s: float, drain_s: float) -> None:
    """Warn at start when a full queue could not drain within the grace period (only possible
    when ``--max-queue-tokens`` was set by hand above what the engine drains in time)."""
    if drain_s > grace_period_s:
        log.warning(
            "a full queue could take ~%.0f s to drain (longest inputs) but the grace period is %.0f s: requests "
            "still queued at the deadline will get 503; lower --max-queue-tokens or raise --grace-period",
            drain_s,
            grace_period_s,
            extra={
                "fields": {
                    "event": "grace_check",
                    "message": "queue can outlast the grace period",
                    "worst_case_drain_s": round(drain_s, 2),
                    "grace_period_s": grace_period_s,
                }
            },
        )
