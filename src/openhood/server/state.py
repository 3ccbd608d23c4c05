"""What a running server holds: per served model a runtime (its own scheduler, readiness probe
and metrics), plus the process-wide config, metrics and lifecycle.

Every runtime implements ``Runtime``: a ``Served`` model, a ``scheduler.Scheduler``, readiness,
metrics, ``warm_up``. There is one class per scheduler kind, because submitting work is typed by
it: ``ModelRuntime`` (single-pass tasks: the dynamic batcher, length buckets) and
``GenerationRuntime`` (``generate``: the step scheduler). The state keeps them in two typed maps,
so a route of either family gets its own kind without a cast.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Protocol, cast

from opentelemetry import trace

from openhood.models import Served, ServedModel
from openhood.models.generation import ServedGenerator
from openhood.models.tasks import Task
from openhood.scheduler import DynamicBatcher, LengthBuckets, Scheduler
from openhood.scheduler.calibrate import Calibration, calibrate
from openhood.server.config import ServerConfig
from openhood.server.errors import APIError
from openhood.server.health import ReadinessProbe
from openhood.server.lifecycle import Lifecycle, check_grace, queue_token_cap, worst_case_drain_s
from openhood.server.measured import Measured, cache_key, measure_or_read
from openhood.server.metrics import ModelMetrics, ServerMetrics

log = logging.getLogger("openhood.server")


class Runtime(Protocol):
    """What start-up, readiness, ``/stats``, ``/v1/models`` and the drain need of any runtime."""

    @property
    def model(self) -> Served: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def readiness(self) -> ReadinessProbe: ...

    @property
    def metrics(self) -> ModelMetrics: ...

    @property
    def buckets(self) -> LengthBuckets | None:
        """The length buckets items are batched by (None: not batched by length)."""
        ...

    async def warm_up(self, config: ServerConfig, sharing: int = 1) -> float:
        """Warm the engines; the worst-case seconds a full queue takes to drain."""
        ...


class ModelRuntime:
    """One served single-pass model: its dynamic batcher, buckets, readiness and metrics."""

    scheduler: DynamicBatcher  # set in __init__, after the metrics that read its queue depth
    buckets: LengthBuckets

    def __init__(self, model: ServedModel, config: ServerConfig, metrics: ServerMetrics):
        self.model = model
        # The model's own buckets (model file) or the server's, clipped to its max length.
        self.buckets = LengthBuckets.for_model(model.buckets or config.buckets, model.max_length)
        self.metrics = metrics.for_model(model.name, lambda: self.scheduler.queue_depth, model.memory_bytes)
        policy = config.batch_policy()
        if config.max_batch_tokens is None:  # the surge budget; below it, calibrated ones. Must hold one longest item
            policy = replace(policy, max_batch_tokens=max(policy.max_batch_tokens, self.buckets.bounds[-1]))
        self.scheduler = DynamicBatcher(
            [model.runner(w) for w in range(model.workers)],
            self.buckets,
            policy,
            on_batch=self.metrics.observe_batch,
            on_drop=self.metrics.dropped.inc,
            name=model.name.rsplit("/", 1)[-1],
            wide_run=model.wide_runner(),
            start=[model.starter(w) for w in range(model.workers)],
        )
        self.readiness = ReadinessProbe(
            self.scheduler, model, timeout_s=config.health_timeout_s, stall_timeout_s=config.stall_timeout_s
        )

    def drain_batch_rows(self, config: ServerConfig) -> int:
        """Rows of a full batch of the longest bucket (what a full queue drains in)."""
        return max(1, min(config.max_batch_size, self.scheduler.max_batch_tokens // self.buckets.bounds[-1]))

    def _warm_worker(self, worker: int) -> None:
        """Every bucket length once on this worker's engine."""
        self.model.warm_up(worker, self.buckets.bounds)

    def _warm_wide(self, worker: int) -> None:
        """The wide engine, from this worker's thread: it runs on whichever worker takes a lone
        batch, and its scratch buffers are per calling thread. Warmed from worker 0 only, it grew
        worker 1's buffers mid-run (3 MB that the 30-minute NumPy soak counted as growth)."""
        self.model.warm_up(worker, self.buckets.bounds, wide=True)

    def _full_batch_s(self, worker: int, rows: int) -> float:
        longest = self.buckets.bounds[-1]
        t0 = time.perf_counter()
        self.model.run(worker, [self.model.preprocessor.dummy(longest)] * rows, longest)
        return time.perf_counter() - t0

    async def _on_workers(self, job: Callable[[int], object], workers: Iterable[int]) -> list[object]:
        futures = [self.scheduler.run_exclusive(functools.partial(job, w), worker=w) for w in workers]
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    def _measure(self, calibrated: bool, rows: int) -> Measured:
        """Calibrate on worker 0 (if budgets are not configured), then time a full batch of the
        longest bucket on every worker; runs on a helper thread, each timing on its worker."""
        workers = range(self.model.workers)
        cal: Calibration | None = None
        if calibrated:
            cal = cast(
                Calibration,
                self.scheduler.run_exclusive(
                    lambda: calibrate(
                        self.model.runner(0),
                        self.model.preprocessor.dummy,
                        self.buckets.bounds,
                        max_tokens=self.scheduler.max_batch_tokens,
                    ),
                    worker=0,
                ).result(),
            )
        futures = [
            self.scheduler.run_exclusive(functools.partial(self._full_batch_s, w, rows), worker=w) for w in workers
        ]
        return Measured(cal, max(cast(float, f.result()) for f in futures), cached=False)

    async def warm_up(self, config: ServerConfig, sharing: int = 1) -> float:
        """Warm every worker (on that worker, like all inference); calibrate the token budget
        unless configured; cap the queued tokens so a full queue drains within the grace period
        (shared by ``sharing`` models) unless ``--max-queue-tokens`` is set; return the worst-case
        seconds to drain a full queue, from the slowest worker's measured full batch."""
        workers = range(self.model.workers)
        await self._on_workers(self._warm_worker, workers)
        if self.model.wide is not None:
            for w in workers:  # one at a time: the wide engine serves one thread at once
                await self._on_workers(self._warm_wide, [w])
        # Fixed-shape tasks (one bucket of length 1) count rows, not tokens: their budget is a row cap.
        calibrated = config.max_batch_tokens is None and self.buckets.bounds[-1] > 1
        rows = self.drain_batch_rows(config)
        bounds = tuple(self.buckets.bounds)
        key = cache_key(self.model, bounds, self.scheduler.max_batch_tokens, rows, calibrated)
        measured = await asyncio.to_thread(
            lambda: measure_or_read(key, lambda: self._measure(calibrated, rows), bounds)
        )
        cal = measured.calibration
        if cal is not None:
            self.scheduler.set_token_budgets(cal.budgets)
            self.scheduler.set_token_costs([cal.cost_per_token[t] for t in self.buckets.bounds])
            log.info(
                "model %s: token budgets %s %s in %.2f s",
                self.model.name,
                cal.budgets,
                "read from the cache" if measured.cached else "calibrated",
                cal.seconds,
                extra={
                    "fields": {
                        "event": "token_budget",
                        "message": "token budgets read from the cache"
                        if measured.cached
                        else "token budgets calibrated",
                        "model": self.model.name,
                        "budgets": dict(zip(map(str, self.buckets.bounds), cal.budgets, strict=True)),
                        "surge_budget": self.scheduler.max_batch_tokens,
                        "calibration_s": round(cal.seconds, 3),
                        "cached": measured.cached,
                        "lone_ms": round(cal.lone_s * 1e3, 3),
                        "us_per_token": {str(t): round(c * 1e6, 2) for t, c in cal.cost_per_token.items()},
                    }
                },
            )
        batch_s = measured.batch_s
        longest = self.buckets.bounds[-1]
        tokens_per_s = rows * longest * self.model.workers / max(batch_s, 1e-9)
        cap = config.max_queue_tokens
        if cap is None:
            cap = queue_token_cap(config.grace_period_s, tokens_per_s, sharing)
        self.scheduler.max_queue_tokens = cap
        drain_s = worst_case_drain_s(config.max_queue, rows, batch_s, self.model.workers)
        if cap is not None:
            drain_s = min(drain_s, cap / tokens_per_s)
            log.info(
                "model %s: at most %d queued tokens (a full queue drains in ~%.1f s)",
                self.model.name,
                cap,
                drain_s,
                extra={
                    "fields": {
                        "event": "queue_cap",
                        "message": "queued tokens capped so a full queue drains within the grace period",
                        "model": self.model.name,
                        "max_queue_tokens": cap,
                        "tokens_per_s": round(tokens_per_s, 1),
                        "drain_s": round(drain_s, 3),
                        "set_by": "flag" if config.max_queue_tokens is not None else "grace period",
                    }
                },
            )
        return drain_s


class GenerationRuntime:
    """One served ``generate`` model: its step scheduler, readiness (one generated token on the
    scheduler's thread) and metrics."""

    def __init__(self, model: ServedGenerator, config: ServerConfig, metrics: ServerMetrics):
        from openhood.scheduler.generation import GenerationScheduler

        self.model = model
        gen = model.generator
        self.scheduler = GenerationScheduler(
            model.decoder,
            config.generation,
            eos_ids=gen.eos_ids,
            new_decoder=lambda: gen.tokenizer.stream_decoder(skip_special_tokens=True),
            context_length=model.context_length,
            name=model.name.rsplit("/", 1)[-1],
            on_step=lambda info: self.metrics.observe_step(info),
            on_thread_start=model.bind_thread,
            sampler=model.sampler,
        )
        self.buckets: LengthBuckets | None = None  # sequences are admitted by KV budget, not length buckets
        self.metrics = metrics.for_generator(model.name, self.scheduler, model.memory_bytes)
        self.readiness = ReadinessProbe(
            self.scheduler, model, timeout_s=config.health_timeout_s, stall_timeout_s=config.stall_timeout_s
        )

    async def warm_up(self, config: ServerConfig, sharing: int = 1) -> float:
        """One probe (prefill + a token) on the scheduler's thread; a drain needs no estimate here:
        cutting at the grace deadline ends every stream with finish_reason "length"."""
        await asyncio.wrap_future(self.scheduler.run_exclusive(self.model.probe))
        return 0.0


class ServerState:
    def __init__(
        self,
        config: ServerConfig,
        models: Sequence[Served],
        tracer: trace.Tracer | None = None,
        lifecycle: Lifecycle | None = None,
    ):
        if not models:
            raise ValueError("a server needs at least one model")
        self.config = config
        self.tracer = tracer or trace.NoOpTracer()
        self.lifecycle = lifecycle or Lifecycle()
        self.metrics = ServerMetrics(config.stats_window, in_flight_fn=lambda: self.lifecycle.in_flight)
        self.single_pass: dict[str, ModelRuntime] = {}
        self.generators: dict[str, GenerationRuntime] = {}
        for m in models:
            if isinstance(m, ServedGenerator):
                self.generators[m.name] = GenerationRuntime(m, config, self.metrics)
            elif isinstance(m, ServedModel):
                self.single_pass[m.name] = ModelRuntime(m, config, self.metrics)
            else:
                raise TypeError(f"model {m.name!r} ({m.task}) is neither a single-pass model nor a generator")
        # In the order served (the first of a task is its default), whatever the kind.
        self.runtimes: dict[str, Runtime] = {
            m.name: self.single_pass.get(m.name) or self.generators[m.name] for m in models
        }
        self._aliases = {alias: rt for rt in reversed(self.runtimes.values()) for alias in rt.model.aliases}
        self.route_labels: set[str] = set()  # paths the app serves: the metrics' bounded route label
        # API paths outside /v1/ (the TEI routes): auth, drain gate, in-flight count and access log apply.
        self.api_paths: set[str] = set()
        self.closers: list[Callable[[], None]] = []  # what routes started beside the models (decode pools)

    @property
    def tasks(self) -> list[Task]:
        return list(dict.fromkeys(rt.model.task for rt in self.runtimes.values()))

    def route(self, requested: str | None, task: Task) -> ModelRuntime:
        """The runtime a single-pass request goes to: by ``model`` name, else the first model of ``task``."""
        return self.single_pass[self._lookup(requested, task).model.name]

    def route_generate(self, requested: str | None) -> GenerationRuntime:
        """``route`` for the ``generate`` task's routes."""
        return self.generators[self._lookup(requested, Task.GENERATE).model.name]

    def _lookup(self, requested: str | None, task: Task) -> Runtime:
        if requested is None:
            return next(rt for rt in self.runtimes.values() if rt.model.task == task)
        rt = self._aliases.get(requested)
        if rt is None:
            served = ", ".join(f"'{n}'" for n in self.runtimes)
            raise APIError(
                404,
                f"model '{requested[:100]}' is not served here; this server serves {served}",
                code="model_not_found",
                param="model",
            )
        if rt.model.task != task:
            raise APIError(
                400,
                f"model '{rt.model.name}' does the '{rt.model.task.value}' task, not '{task.value}'",
                code="wrong_task",
                param="model",
            )
        return rt

    def start(self) -> None:
        for rt in self.runtimes.values():
            rt.scheduler.start()

    async def warm_up(self) -> None:
        """Warm every model before the port opens, so first requests pay no first-call costs."""
        drain_s = 0.0  # the models share the cores: their drains add up
        for rt in self.runtimes.values():
            t0 = time.perf_counter()
            drain_s += await rt.warm_up(self.config, len(self.single_pass))
            log.info("model %s warmed up for buckets %s in %.2f s", rt.model.name, rt.buckets, time.perf_counter() - t0)
        check_grace(self.config.grace_period_s, drain_s)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop every model's workers (each finishes its queue) within ``timeout`` overall."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stopped = True
        for rt in self.runtimes.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            stopped = rt.scheduler.stop(left) and stopped
        return stopped

    def close(self) -> None:
        """Release every model's engines (only after the workers stopped) and what routes started."""
        for rt in self.runtimes.values():
            rt.model.close()
        for close in self.closers:
            close()
