"""What a running server holds: per served model a ``ModelRuntime`` (its own queue, buckets,
workers, readiness probe and metrics), plus the process-wide config, metrics and lifecycle.

Requests are routed by their ``model`` field (``ServerState.route``): a missing field means the
first served model of the route's task, an unknown name is a 404 in OpenAI's shape, a model of
another task a 400. Each model batches on its own: a slow model's backlog never delays
another's batches (they do share the CPU cores). The trade-off: N models mean N sets of worker
threads; ``--workers``/``--threads`` apply to each.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import cast

from opentelemetry import trace

from openhood.models import ServedModel
from openhood.scheduler import DynamicBatcher, LengthBuckets
from openhood.server.config import ServerConfig
from openhood.server.errors import APIError
from openhood.server.health import ReadinessProbe
from openhood.server.lifecycle import Lifecycle, check_grace, worst_case_drain_s
from openhood.server.metrics import ServerMetrics

log = logging.getLogger("openhood.server")


class ModelRuntime:
    """One served model in the server: batcher, buckets, readiness and metrics of its own."""

    batcher: DynamicBatcher  # set in __init__, after the metrics that read its queue depth

    def __init__(self, model: ServedModel, config: ServerConfig, metrics: ServerMetrics):
        self.model = model
        # The model's own buckets (model file) or the server's, clipped to its max length.
        self.buckets = LengthBuckets.for_model(model.buckets or config.buckets, model.max_length)
        self.metrics = metrics.for_model(model.name, lambda: self.batcher.queue_depth, model.memory_bytes)
        self.batcher = DynamicBatcher(
            [model.runner(w) for w in range(model.workers)],
            self.buckets,
            config.batch_policy(),
            on_batch=self.metrics.observe_batch,
            on_drop=self.metrics.dropped.inc,
            name=model.name.rsplit("/", 1)[-1],
        )
        self.readiness = ReadinessProbe(
            self.batcher, model, timeout_s=config.health_timeout_s, stall_timeout_s=config.stall_timeout_s
        )

    def drain_batch_rows(self, config: ServerConfig) -> int:
        """Rows of a full batch of the longest bucket (what a full queue drains in)."""
        return max(1, min(config.max_batch_size, config.max_batch_tokens // self.buckets.bounds[-1]))

    def _warm_worker(self, worker: int, rows: int) -> float:
        """Every bucket length once, then one full batch of the longest; returns that batch's seconds."""
        self.model.warm_up(worker, self.buckets.bounds)
        longest = self.buckets.bounds[-1]
        t0 = time.perf_counter()
        self.model.run(worker, [self.model.preprocessor.dummy(longest)] * rows, longest)
        return time.perf_counter() - t0

    async def warm_up(self, config: ServerConfig) -> float:
        """Warm every worker (on that worker, like all inference); the worst-case seconds to drain
        a full queue, from the slowest worker's measured full batch."""
        rows = self.drain_batch_rows(config)
        jobs = [self.batcher.run_exclusive(functools.partial(self._warm_worker, w, rows), worker=w)
                for w in range(self.model.workers)]
        times = cast(list[float], await asyncio.gather(*(asyncio.wrap_future(j) for j in jobs)))
        batch_s = max(times)
        return worst_case_drain_s(config.max_queue, rows, batch_s, self.model.workers)


class ServerState:
    def __init__(self, config: ServerConfig, models: list[ServedModel], tracer: trace.Tracer | None = None, lifecycle: Lifecycle | None = None):
        if not models:
            raise ValueError("a server needs at least one model")
        self.config = config
        self.tracer = tracer or trace.NoOpTracer()
        self.lifecycle = lifecycle or Lifecycle()
        self.metrics = ServerMetrics(config.stats_window, in_flight_fn=lambda: self.lifecycle.in_flight)
        self.runtimes: dict[str, ModelRuntime] = {m.name: ModelRuntime(m, config, self.metrics) for m in models}
        self._aliases = {alias: rt for rt in reversed(self.runtimes.values()) for alias in rt.model.aliases}
        self.route_labels: set[str] = set()  # paths the app serves: the metrics' bounded route label
        # API paths outside /v1/ (the TEI routes): auth, drain gate, in-flight count and access log apply.
        self.api_paths: set[str] = set()

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(rt.model.task for rt in self.runtimes.values()))

    def route(self, requested: str | None, task: str) -> ModelRuntime:
        """The runtime a request goes to: by ``model`` name, else the first model of ``task``."""
        if requested is None:
            return next(rt for rt in self.runtimes.values() if rt.model.task == task)
        rt = self._aliases.get(requested)
        if rt is None:
            served = ", ".join(f"'{n}'" for n in self.runtimes)
            raise APIError(404, f"model '{requested[:100]}' is not served here; this server serves {served}",
                           code="model_not_found", param="model")
        if rt.model.task != task:
            raise APIError(400, f"model '{rt.model.name}' does the {rt.model.task!r} task, not {task!r}",
                           code="wrong_task", param="model")
        return rt

    def start(self) -> None:
        for rt in self.runtimes.values():
            rt.batcher.start()

    async def warm_up(self) -> None:
        """Warm every model before the port opens, so first requests pay no first-call costs."""
        drain_s = 0.0  # the models share the cores: their drains add up
        for rt in self.runtimes.values():
            t0 = time.perf_counter()
            drain_s += await rt.warm_up(self.config)
            log.info("model %s warmed up for buckets %s in %.2f s", rt.model.name, rt.buckets, time.perf_counter() - t0)
        check_grace(self.config.grace_period_s, drain_s)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop every model's workers (each finishes its queue) within ``timeout`` overall."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stopped = True
        for rt in self.runtimes.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            stopped = rt.batcher.stop(left) and stopped
        return stopped

    def close(self) -> None:
        """Release every model's engines; only after the workers stopped."""
        for rt in self.runtimes.values():
            rt.model.close()
