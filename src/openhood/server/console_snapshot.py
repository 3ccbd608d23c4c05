"""The console's live numbers: one snapshot per tick, read from the ``/metrics`` registry, shared by
every connected browser.

Every figure comes from the Prometheus registry that ``/metrics`` exposes (counters, gauges and
histogram buckets, read with ``registry.collect()``) or from the ``/stats`` latency window, so the
console and a scrape can never disagree: rates are the counters' differences over the last
``RATE_WINDOW_S`` of ticks, the batch-size distribution is the histogram's buckets over the same
window, P50/P99 per length bucket and the stage split are the ``/stats`` window's, and the RSS
trend is the soak's growth fit (``openhood.growth``) over the last ``RSS_HISTORY_S`` of ticks.

One ``ConsoleSampler`` per server samples once a tick while at least one browser listens and
never otherwise, and keeps only the newest snapshot (bytes): a subscriber that was slow to take
a tick gets the newest one next, never a queue of old ones, so a slow browser costs the server
one reference, not memory that grows. The trade-off: a slow browser skips ticks (its charts show
fewer points), and the numbers are as fresh as the tick (1 s), not per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
from prometheus_client import CollectorRegistry

from openhood.growth import fit_growth
from openhood.models.tasks import Task
from openhood.scheduler import DynamicBatcher
from openhood.server.state import ServerState

TICK_S = 1.0  # one snapshot a second for every browser together
RATE_WINDOW_S = 5.0  # requests/s, errors/s, CPU and batch sizes: over the last 5 s of ticks
RSS_HISTORY_S = 600.0  # the RSS trend fits the last 10 minutes of ticks
RSS_TREND_MIN_S = 30.0  # and says nothing before 30 s of them: a line through a few seconds is noise
# Readiness is the ``openhood_ready`` gauge that ``/health/ready`` sets; while a console listens it
# also runs the same probe this often, so a server nobody probes does not read "not ready".
PROBE_EVERY_S = 10.0

log = logging.getLogger("openhood.server")

Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name → (labels, value) per series


def read_registry(registry: CollectorRegistry) -> Samples:
    """Every sample of the registry, by sample name (``openhood_requests_total``, ``…_bucket``)."""
    out: Samples = defaultdict(list)
    for family in registry.collect():
        for sample in family.samples:
            out[sample.name].append((sample.labels, sample.value))
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of the series of ``name`` whose labels include ``match``."""
    return sum(v for labels, v in samples.get(name, ()) if all(labels.get(k) == want for k, want in match.items()))


def by_label(samples: Samples, name: str, key: str, **match: str) -> dict[str, float]:
    """``name``'s series summed per value of label ``key`` (e.g. failures per error code)."""
    out: dict[str, float] = defaultdict(float)
    for labels, v in samples.get(name, ()):
        if all(labels.get(k) == want for k, want in match.items()):
            out[labels[key]] += v
    return dict(out)


def histogram(samples: Samples, name: str, model: str) -> tuple[list[str], list[float]]:
    """A histogram's upper bounds and per-bucket (not cumulative) counts for one model."""
    rows = sorted(
        ((float(labels["le"]), v) for labels, v in samples.get(name + "_bucket", ()) if labels.get("model") == model),
        key=lambda r: r[0],
    )
    cumulative = np.array([v for _, v in rows])
    counts = np.diff(cumulative, prepend=0.0) if rows else cumulative
    return [f"{le:g}" for le, _ in rows], [float(c) for c in counts]


class ConsoleSampler:
    """Samples while browsers listen; each listener iterates ``updates()`` for the newest snapshot."""

    def __init__(self, state: ServerState):
        self.state = state
        self.latest = b""
        self.seq = 0
        self.listeners = 0
        self._readings: deque[tuple[float, Samples]] = deque()  # (monotonic s, samples), RATE_WINDOW_S of them
        self._rss: deque[tuple[float, float]] = deque(maxlen=int(RSS_HISTORY_S / TICK_S))
        self._tick = asyncio.Event()  # replaced every tick; waiters hold the one they wait on
        self._task: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._probed_at = -PROBE_EVERY_S

    async def updates(self) -> AsyncIterator[bytes]:
        """The newest snapshot once per tick until the server drains; ticks this listener was too
        slow to take are skipped, not queued."""
        self.listeners += 1
        restart = self._task is None or self._task.done()
        if restart:
            self._task = asyncio.ensure_future(self._run())
        try:
            seen = self.seq if restart else 0  # after a pause the last snapshot is stale: wait for a fresh one
            while not self.state.lifecycle.draining:
                if self.seq == seen:
                    await self._tick.wait()
                    continue
                seen = self.seq
                yield self.latest
        finally:
            self.listeners -= 1

    async def _run(self) -> None:
        while self.listeners > 0:
            start = time.monotonic()
            if start - self._probed_at >= PROBE_EVERY_S and (self._probe is None or self._probe.done()):
                self._probed_at = start
                self._probe = asyncio.ensure_future(self._check_readiness())
            try:
                self.latest = orjson.dumps(self.snapshot(start))
                self.seq += 1
            except Exception:  # a broken tick must not end every console's stream: log it, try the next
                log.exception("console snapshot failed")
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()
            await asyncio.sleep(max(0.0, TICK_S - (time.monotonic() - start)))
        self._readings.clear()  # the next listener's rates start afresh, not from a stale base

    async def _check_readiness(self) -> None:
        """What ``/health/ready`` does per model: the (cached, worker-side) probe, into the gauge."""
        for rt in self.state.runtimes.values():
            ok, _ = await rt.readiness.check()
            rt.metrics.ready.set(1 if ok else 0)

    def snapshot(self, now: float) -> dict[str, Any]:
        """One tick's numbers: process-wide and per served model."""
        st = self.state
        cur = read_registry(st.metrics.registry)
        self._readings.append((now, cur))
        while len(self._readings) > 2 and self._readings[1][0] <= now - RATE_WINDOW_S:
            self._readings.popleft()
        base_t, base = self._readings[0]
        dt = now - base_t

        def rate(name: str, **match: str) -> float | None:
            return (total(cur, name, **match) - total(base, name, **match)) / dt if dt > 0 else None

        rss = total(cur, "openhood_process_rss_bytes")
        self._rss.append((now, rss))
        t = np.array([p[0] for p in self._rss]) - self._rss[0][0]
        trend = None
        if t[-1] >= RSS_TREND_MIN_S:
            trend = fit_growth(t, np.array([p[1] for p in self._rss]), float(t[-1]) / 2, float(t[-1]))
        unrouted = by_label(cur, "openhood_request_failures_total", "error", model="")
        return {
            "tick_s": TICK_S,
            "window_s": round(dt, 3),
            "draining": st.lifecycle.draining,
            "process": {
                "rss_bytes": rss,
                "rss_trend": None
                if trend is None
                else {
                    "seconds": round(float(t[-1]), 1),
                    "bytes_per_s": round(trend["slope_per_s"], 1),
                    "growth_pct": trend["growth_pct"],
                },
                "rss_trend_after_s": RSS_TREND_MIN_S,
                "cpu_cores": rate("process_cpu_seconds_total"),
                "in_flight": total(cur, "openhood_in_flight_requests"),
                "console_streams": self.listeners,  # this page's own cost: how many consoles listen
                "unrouted_errors": unrouted,
            },
            "models": {name: self._model(name, cur, base, dt) for name in st.runtimes},
        }

    def _model(self, name: str, cur: Samples, base: Samples, dt: float) -> dict[str, Any]:
        rt = self.state.runtimes[name]
        per_s = (lambda a, b: (a - b) / dt) if dt > 0 else (lambda a, b: None)
        errors_now = by_label(cur, "openhood_request_failures_total", "error", model=name)
        errors_base = by_label(base, "openhood_request_failures_total", "error", model=name)
        le, sizes_now = histogram(cur, "openhood_batch_size", name)
        _, sizes_base = histogram(base, "openhood_batch_size", name)
        table = rt.metrics.window.table()
        why = self._not_ready(
            rt.scheduler.worker_alive, rt.scheduler.busy_for_s(), total(cur, "openhood_ready", model=name)
        )
        out: dict[str, Any] = {
            "task": rt.model.task,
            "ready": why is None,
            "why": why or "the last readiness probe passed",
            "requests_total": total(cur, "openhood_requests_total", model=name),
            "requests_per_s": per_s(
                total(cur, "openhood_requests_total", model=name), total(base, "openhood_requests_total", model=name)
            ),
            "errors": {
                code: {"total": n, "per_s": per_s(n, errors_base.get(code, 0.0))} for code, n in errors_now.items()
            },
            "queue_depth": total(cur, "openhood_queue_depth", model=name),
            "tokens_per_s": total(cur, "openhood_tokens_per_second", model=name),
            "batch_sizes": {
                "le": le,
                "window": [a - b for a, b in zip(sizes_now, sizes_base or [0.0] * len(le), strict=True)],
                "total": sizes_now,
            },
            "latency": {
                "requests": table["requests"],
                "window": table["window"],
                "by_length": {
                    label: {"count": row["count"], **row.get("total", {})} for label, row in table["by_length"].items()
                },
                # P50 of each stage over the window, all lengths: where a typical request's time goes
                "stages_p50_ms": {
                    stage: row["p50_ms"]
                    for stage, row in table["by_length"]["all"].items()
                    if isinstance(row, dict) and stage != "total"
                },
            },
        }
        if isinstance(rt.scheduler, DynamicBatcher) and rt.scheduler.preemptive:
            # Layer-granular preemption (scheduler.preemption): yields per second and in all, and
            # batches suspended right now; its stage ("preempted") is in stages_p50_ms above.
            yields = total(cur, "openhood_preemptions_total", model=name)
            out["preemption"] = {
                "total": yields,
                "per_s": per_s(yields, total(base, "openhood_preemptions_total", model=name)),
                "suspended": rt.scheduler.suspended,
            }
        if rt.model.task is Task.GENERATE:
            out["running_sequences"] = total(cur, "openhood_generation_running_sequences", model=name)
            out["waiting_sequences"] = total(cur, "openhood_generation_waiting_sequences", model=name)
            out["kv_cache_bytes"] = total(cur, "openhood_kv_cache_bytes_used", model=name)
        if rt.model.task is Task.IMAGE_CLASSIFY:
            out["decode_pool"] = {
                "workers": total(cur, "openhood_image_decode_workers", model=name),
                "busy": total(cur, "openhood_image_decode_workers_busy", model=name),
                "pending": total(cur, "openhood_image_decode_pending", model=name),
            }
        return out

    def _not_ready(self, alive: bool, busy_s: float, gauge: float) -> str | None:
        """Why a model is not ready (the readiness rule's cheap checks and the last probe), or None."""
        if self.state.lifecycle.draining:
            return "draining"
        if not alive:
            return "the inference worker thread is not running"
        if busy_s > self.state.config.stall_timeout_s:
            return f"the inference worker has been inside one batch for {busy_s:.1f} s"
        return None if gauge == 1 else "the last readiness probe failed"
