"""The console's sampler (server/console_snapshot.py) without a browser: a slow listener skips
ticks instead of queueing them, a closed stream stops the sampling, a drain ends the stream, and
the snapshot's numbers are the registry's."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

from openhood.server import console_snapshot
from openhood.server.console_snapshot import ConsoleSampler, by_label, histogram, read_registry, total
from openhood.server.lifecycle import Lifecycle
from openhood.server.metrics import ServerMetrics


def fake_state() -> SimpleNamespace:
    """What the sampler reads of a server, with no model: the registry and the lifecycle."""
    return SimpleNamespace(metrics=ServerMetrics(), lifecycle=Lifecycle(), runtimes={}, config=None)


def test_a_slow_listener_skips_ticks_and_a_closed_one_stops_the_sampler(monkeypatch):
    monkeypatch.setattr(console_snapshot, "TICK_S", 0.02)

    async def run() -> tuple[list[int], int, bool]:
        sampler = ConsoleSampler(fake_state())
        seen = []
        updates = sampler.updates()
        async for _ in updates:
            seen.append(sampler.seq)
            if len(seen) == 4:
                break
            await asyncio.sleep(0.1)  # five ticks pass while this listener is busy
        await updates.aclose()
        listeners = sampler.listeners
        await asyncio.sleep(0.1)
        return seen, listeners, sampler._task.done()

    seen, listeners, stopped = asyncio.run(run())
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    # the ticks it missed were dropped, not queued for it (queued, every gap would be 1); >= 2, not
    # the 5 ticks the sleep spans: on a loaded machine a tick's snapshot itself takes tens of ms
    assert min(gaps) >= 2, seen
    assert listeners == 0 and stopped


def test_the_stream_ends_when_the_server_drains(monkeypatch):
    monkeypatch.setattr(console_snapshot, "TICK_S", 0.02)

    async def run() -> int:
        state = fake_state()
        sampler = ConsoleSampler(state)
        n = 0
        async for snapshot in sampler.updates():
            n += 1
            assert b'"process"' in snapshot
            if n == 2:
                state.lifecycle.begin_drain()
        return n

    assert asyncio.run(asyncio.wait_for(run(), 5)) == 2


def test_rates_and_batch_sizes_come_from_the_registry():
    state = fake_state()
    sampler = ConsoleSampler(state)
    m = state.metrics
    sampler.snapshot(100.0)
    for _ in range(6):
        m.requests.labels("a", "/v1/embeddings", "success").inc()
    m.request_failures.labels("a", "/v1/embeddings", "queue_full").inc(2)
    m.batch_size.labels("a").observe(3)
    m.batch_size.labels("a").observe(3)
    snap = sampler.snapshot(102.0)  # two seconds later
    assert snap["window_s"] == 2.0
    samples = read_registry(m.registry)
    le, counts = histogram(samples, "openhood_batch_size", "a")
    assert total(samples, "openhood_requests_total", model="a") == 6
    assert by_label(samples, "openhood_request_failures_total", "error", model="a") == {"queue_full": 2}
    assert counts[le.index("4")] == 2 and sum(counts) == 2  # per bucket, not cumulative
    assert snap["process"]["rss_bytes"] > 0 and snap["process"]["cpu_cores"] >= 0


def test_a_failing_tick_is_logged_and_the_next_one_still_comes(monkeypatch, caplog):
    monkeypatch.setattr(console_snapshot, "TICK_S", 0.02)
    sampler = ConsoleSampler(fake_state())
    real, calls = sampler.snapshot, []

    def flaky(now: float) -> dict:
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("broken tick")
        return real(now)

    monkeypatch.setattr(sampler, "snapshot", flaky)

    async def first() -> bytes:
        updates = sampler.updates()
        try:
            return await anext(updates)
        finally:
            await updates.aclose()

    assert b'"process"' in asyncio.run(asyncio.wait_for(first(), 5))
    assert len(calls) >= 2 and "console snapshot failed" in caplog.text


def test_a_listener_after_a_pause_gets_a_fresh_snapshot_not_the_last_one(monkeypatch):
    monkeypatch.setattr(console_snapshot, "TICK_S", 0.02)

    async def run() -> tuple[int, int]:
        sampler = ConsoleSampler(fake_state())
        updates = sampler.updates()
        await anext(updates)
        await updates.aclose()
        await asyncio.sleep(0.1)  # nobody listens: the sampler stops
        before = sampler.seq
        updates = sampler.updates()
        await anext(updates)
        after = sampler.seq
        await updates.aclose()
        return before, after

    before, after = asyncio.run(asyncio.wait_for(run(), 5))
    assert after == before + 1
