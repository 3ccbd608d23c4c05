"""Prometheus metrics (own registry) and the sliding-window latency table behind ``GET /stats``.

What is exported, and why each exists:
Every series about a model's work carries a ``model`` label (its served name: a short, bounded
set fixed at start-up); process-wide ones (HTTP status per route, RSS, in-flight) do not.
- ``openhood_http_requests_total{route,status}`` — traffic and errors per route.
- ``openhood_requests_total{model,route,outcome}`` and ``openhood_request_failures_total{model,
  route,error}`` — TEI's request count / success / failure per served model and API route
  (``model=""`` when refused before routing; ``error`` is the bounded error code, never text).
- ``openhood_request_stage_seconds{stage}`` — total / tokenize / queue / inference / preempted /
  postprocess of each embeddings request: which stage a slow request spent its time in
  ("preempted": the time its batch was suspended for shorter ones, ``scheduler.preemption``; it
  is not part of "inference").
- ``openhood_preemptions_total`` — yields: a running batch suspended at a layer boundary for a
  shorter one (``/stats`` shows it beside the batches that yielded).
- ``openhood_request_seconds_by_length{length_bucket}`` — total latency per input-length bucket
  (fixed labels 0-32 … 257+, so cardinality is bounded): a slow bucket shows at once.
- ``openhood_input_tokens`` / ``openhood_batch_size`` / ``openhood_batch_tokens`` /
  ``openhood_batch_padding_waste_ratio`` histograms and padding/real token counters.
- ``openhood_wide_batches_total`` — batches that ran on the all-cores engine (scheduler's wide
  path): how often a lone request got every core.
- ``openhood_image_decode_workers``, ``…_workers_busy``, ``openhood_image_decode_pending`` — an
  ``image-classify`` model's decode pool: its size, how many workers decode now, what waits.
- ``openhood_queue_depth``, ``openhood_in_flight_requests``, ``openhood_tokens_per_second``
  (last 10 s), ``openhood_process_rss_bytes`` gauges; batch outcomes, drops, rejections.
- Generation (``generate`` models): ``openhood_generation_ttft_seconds`` and
  ``openhood_generation_inter_token_seconds`` histograms (as the HTTP handler hands tokens to
  the client), ``openhood_generated_tokens_total`` (``rate()`` is tokens/s) and
  ``openhood_generation_prompt_tokens_total`` counters, ``openhood_generation_running_sequences``,
  ``openhood_generation_waiting_sequences`` and ``openhood_kv_cache_bytes_used`` gauges, and
  ``openhood_generation_step_seconds`` (one scheduler iteration) and finish reasons; the prefix
  cache's ``openhood_prefix_cache_{lookups,hits,cached_tokens,evictions}_total`` (hit rate:
  ``rate(hits) / rate(lookups)``) beside ``openhood_generation_prefill_computed_tokens_total``.
The trade-off: histograms cost a few µs per observation; percentiles for humans come from the
``/stats`` window (exact over the last N requests) rather than from histogram buckets.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest

from openhood.scheduler import LENGTH_LABELS, BatchInfo
from openhood.scheduler.generation import GenerationScheduler, StepInfo

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
TOKEN_BUCKETS = (8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512)
STAGES = ("total", "tokenize", "queue", "inference", "preempted", "postprocess")
THROUGHPUT_WINDOW_S = 10.0
INTER_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
REJECT_REASONS = ("queue_full", "draining")


class ServerMetrics:
    """The process-wide registry; per-model series come from ``for_model(name)``."""

    def __init__(self, stats_window: int = 2048, in_flight_fn: Callable[[], float] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.stats_window = stats_window
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu seconds, open fds
        self.http_requests = Counter(
            "openhood_http_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        m = ["model"]  # every per-model series carries the served model's name
        self.requests = Counter(
            "openhood_requests",
            "API requests by served model, route and outcome (success: status < 400)",
            [*m, "route", "outcome"],
            registry=r,
        )
        self.request_failures = Counter(
            "openhood_request_failures",
            "Failed API requests by served model, route and error code",
            [*m, "route", "error"],
            registry=r,
        )
        self.stage_seconds = Histogram(
            "openhood_request_stage_seconds",
            "Per-stage time of /v1 requests (queue/inference: the slowest item's batch)",
            [*m, "stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.by_length = Histogram(
            "openhood_request_seconds_by_length",
            "Total /v1 request latency by the request's longest input (tokens)",
            [*m, "length_bucket"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.input_tokens = Histogram(
            "openhood_input_tokens", "Tokens per input sequence after truncation", m, buckets=TOKEN_BUCKETS, registry=r
        )
        self.inputs_per_request = Histogram(
            "openhood_inputs_per_request",
            "Inputs per request",
            m,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.truncated = Counter(
            "openhood_truncated_inputs", "Inputs truncated to the model's max length", m, registry=r
        )
        self.batch_size = Histogram(
            "openhood_batch_size", "Rows per engine call", m, buckets=(1, 2, 4, 8, 16, 24, 32, 48, 64, 128), registry=r
        )
        self.batch_tokens = Histogram(
            "openhood_batch_tokens",
            "Padded tokens (B x T) per engine call",
            m,
            buckets=(64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
            registry=r,
        )
        self.padding_waste = Histogram(
            "openhood_batch_padding_waste_ratio",
            "Share of a batch's padded tokens that are padding",
            m,
            buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
            registry=r,
        )
        self.padded_tokens = Counter("openhood_padded_tokens", "Padded tokens sent to the engine", m, registry=r)
        self.real_tokens = Counter("openhood_real_tokens", "Non-padding tokens sent to the engine", m, registry=r)
        self.inference_seconds = Histogram(
            "openhood_batch_inference_seconds", "Engine time per batch", m, buckets=LATENCY_BUCKETS, registry=r
        )
        self.batches = Counter("openhood_batches", "Engine calls by outcome", [*m, "outcome"], registry=r)
        self.wide_batches = Counter(
            "openhood_wide_batches",
            "Engine calls run on the all-cores engine (a lone batch on an idle server)",
            m,
            registry=r,
        )
        self.preemptions = Counter(
            "openhood_preemptions",
            "Yields: a running batch suspended at a layer boundary for a shorter one",
            m,
            registry=r,
        )
        self.dropped = Counter(
            "openhood_dropped_sequences", "Queued items dropped before inference (client went away)", m, registry=r
        )
        # model="" for refusals before any model is chosen (draining).
        self.rejected = Counter(
            "openhood_rejected_requests", "Requests refused before queueing", [*m, "reason"], registry=r
        )
        self.connections_refused = Counter(
            "openhood_connections_refused",
            "Connections refused or closed by a limit (server/limits.py)",
            ["reason"],
            registry=r,
        )
        self.client_disconnects = Counter(
            "openhood_client_disconnects", "/v1 requests whose client went away before the response", registry=r
        )
        self.drain_cut = Counter(
            "openhood_drain_cut_requests", "Requests answered 503 because the drain's grace period ran out", registry=r
        )
        self.queue_depth = Gauge("openhood_queue_depth", "Items waiting for a batch", m, registry=r)
        self.in_flight = Gauge("openhood_in_flight_requests", "/v1 requests being handled", registry=r)
        if in_flight_fn is not None:
            self.in_flight.set_function(in_flight_fn)
        self.tokens_per_s = Gauge(
            "openhood_tokens_per_second",
            f"Real tokens (items) processed per second over the last {THROUGHPUT_WINDOW_S:.0f} s",
            m,
            registry=r,
        )
        self.model_memory = Gauge(
            "openhood_model_memory_bytes", "Resident memory the model's load added", m, registry=r
        )
        self.rss = Gauge("openhood_process_rss_bytes", "Resident set size of the server process", registry=r)
        self._process = psutil.Process()
        self.rss.set_function(lambda: self._process.memory_info().rss)
        self.decode_workers = Gauge(
            "openhood_image_decode_workers", "Worker processes of the model's image decode pool", m, registry=r
        )
        self.decode_busy = Gauge(
            "openhood_image_decode_workers_busy", "Decode pool workers decoding an image now", m, registry=r
        )
        self.decode_pending = Gauge(
            "openhood_image_decode_pending", "Images waiting for a decode pool worker or slot", m, registry=r
        )
        self.ready = Gauge("openhood_ready", "1 when the model's last readiness probe passed", m, registry=r)
        self.ttft = Histogram(
            "openhood_generation_ttft_seconds",
            "Time from request to its first generated token",
            m,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "openhood_generation_inter_token_seconds",
            "Time between a stream's tokens",
            m,
            buckets=INTER_TOKEN_BUCKETS,
            registry=r,
        )
        self.generated_tokens = Counter("openhood_generated_tokens", "Tokens sampled by generate models", m, registry=r)
        self.prompt_tokens = Counter(
            "openhood_generation_prompt_tokens", "Prompt tokens of generation requests", m, registry=r
        )
        self.running_sequences = Gauge(
            "openhood_generation_running_sequences", "Sequences in the running batch", m, registry=r
        )
        self.waiting_sequences = Gauge(
            "openhood_generation_waiting_sequences", "Sequences waiting for admission", m, registry=r
        )
        self.kv_cache_bytes = Gauge(
            "openhood_kv_cache_bytes_used", "KV-cache bytes filled by running sequences", m, registry=r
        )
        self.step_seconds = Histogram(
            "openhood_generation_step_seconds",
            "One generation scheduler step (decode + prefill)",
            m,
            buckets=INTER_TOKEN_BUCKETS,
            registry=r,
        )
        self.prefix_cache = {
            name: Counter(f"openhood_prefix_cache_{name}", help_, m, registry=r)
            for name, help_ in (
                ("lookups", "Sequences admitted, each a prefix-cache lookup"),
                ("hits", "Admissions that reused a cached prompt prefix"),
                ("cached_tokens", "Prompt tokens taken from the prefix cache instead of computed"),
                ("evictions", "Cached prefixes dropped unused to give their KV slot to another prompt"),
            )
        }
        self.prefill_computed = Counter(
            "openhood_generation_prefill_computed_tokens", "Prompt tokens run through the forward", m, registry=r
        )
        self.finished = Counter(
            "openhood_generation_finished", "Finished generation sequences by finish reason", [*m, "reason"], registry=r
        )

    def observe_api_request(self, model: str, route: str, status: int, error: str | None) -> None:
        """One finished API request; ``model`` is a served name or "" (refused before routing)."""
        ok = status < 400
        self.requests.labels(model, route, "success" if ok else "failure").inc()
        if not ok:
            self.request_failures.labels(model, route, error or f"http_{status}").inc()

    def for_model(self, name: str, queue_depth_fn: Callable[[], float], memory_bytes: int = 0) -> ModelMetrics:
        return ModelMetrics(self, name, queue_depth_fn, memory_bytes)

    def for_generator(self, name: str, scheduler: GenerationScheduler, memory_bytes: int = 0) -> GenerationMetrics:
        return GenerationMetrics(self, name, scheduler, memory_bytes)

    def watch_decode_pool(self, name: str, stats: Callable[[], dict[str, Any]], workers: int) -> None:
        """The decode pool gauges of image model ``name``, read from ``stats()`` (``DecodePool.stats``) at scrape time."""
        self.decode_workers.labels(name).set(workers)
        self.decode_busy.labels(name).set_function(lambda: len(stats()["busy"]))
        self.decode_pending.labels(name).set_function(lambda: stats()["pending"])

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def rss_bytes(self) -> int:
        return int(self._process.memory_info().rss)


class ModelMetrics:
    """One served model's children of the shared series, its throughput and its /stats window."""

    def __init__(self, server: ServerMetrics, name: str, queue_depth_fn: Callable[[], float], memory_bytes: int):
        self.name = name
        self.server = server
        s = server
        self.batch_size, self.batch_tokens = s.batch_size.labels(name), s.batch_tokens.labels(name)
        self.padding_waste, self.inference_seconds = s.padding_waste.labels(name), s.inference_seconds.labels(name)
        self.padded_tokens, self.real_tokens = s.padded_tokens.labels(name), s.real_tokens.labels(name)
        self.input_tokens, self.inputs_per_request = s.input_tokens.labels(name), s.inputs_per_request.labels(name)
        self.truncated, self.dropped = s.truncated.labels(name), s.dropped.labels(name)
        self.ready = s.ready.labels(name)
        self.wide_batches = s.wide_batches.labels(name)
        self.preemptions = s.preemptions.labels(name)
        self._yields = 0  # for /stats: the counter's value without reading the registry
        self._preempted_batches = 0
        # Children resolved once: ``labels()`` takes a lock and builds a key on every call.
        self._stage = {stage: s.stage_seconds.labels(name, stage) for stage in STAGES}
        self._by_length = {label: s.by_length.labels(name, label) for label in LENGTH_LABELS}
        s.queue_depth.labels(name).set_function(queue_depth_fn)
        s.tokens_per_s.labels(name).set_function(self._tokens_per_s)
        s.model_memory.labels(name).set(memory_bytes)
        for reason in REJECT_REASONS:  # present at 0 from the start, so rate() has a series before the first refusal
            s.rejected.labels(name, reason)
        self._throughput: deque[tuple[float, int]] = deque()  # (monotonic s, real tokens) per batch
        self._throughput_lock = threading.Lock()  # written by the worker, read by the scrape
        self.window = LatencyWindow(s.stats_window)

    def rejected(self, reason: str) -> None:
        self.server.rejected.labels(self.name, reason).inc()

    def observe_batch(self, info: BatchInfo, ok: bool) -> None:
        """Called on the worker thread after every engine call."""
        self.server.batches.labels(self.name, "ok" if ok else "error").inc()
        self.batch_size.observe(info.size)
        self.batch_tokens.observe(info.padded_tokens)
        self.padding_waste.observe(info.padding_waste)
        self.inference_seconds.observe((info.inference_end_ns - info.inference_start_ns) / 1e9)
        if info.wide:
            self.wide_batches.inc()
        if info.yields:
            self.preemptions.inc(info.yields)
            self._yields += info.yields
            self._preempted_batches += 1
        if ok:
            self.padded_tokens.inc(info.padded_tokens)
            self.real_tokens.inc(info.real_tokens)
            self.observe_tokens(info.real_tokens)

    def preemption(self) -> dict[str, int]:
        """/stats: yields so far and the batches that yielded at least once."""
        return {"yields": self._yields, "preempted_batches": self._preempted_batches}

    def observe_tokens(self, n: int) -> None:
        """``n`` real tokens processed now (the tokens/s gauge's window)."""
        now = time.monotonic()
        with self._throughput_lock:
            self._throughput.append((now, n))
            self._drop_old(now)

    def _drop_old(self, now: float) -> None:
        """Forget entries older than the window. Called on every append, not only when the
        gauge is read: a server nobody scrapes kept one tuple per batch for ever (the 30-minute
        soak's top growing site, 1.4 MB)."""
        while self._throughput and self._throughput[0][0] < now - THROUGHPUT_WINDOW_S:
            self._throughput.popleft()

    def _tokens_per_s(self) -> float:
        now = time.monotonic()
        with self._throughput_lock:
            self._drop_old(now)
            total = sum(tokens for _, tokens in self._throughput)
        return total / THROUGHPUT_WINDOW_S

    def observe_request(
        self, stages: dict[str, float], length_bucket: str, token_counts: list[int], truncated: int
    ) -> None:
        for stage, child in self._stage.items():
            if stage in stages:
                child.observe(stages[stage])
        self._by_length[length_bucket].observe(stages["total"])
        for n in token_counts:
            self.input_tokens.observe(n)
        self.inputs_per_request.observe(len(token_counts))
        if truncated:
            self.truncated.inc(truncated)
        self.window.add(length_bucket, stages)


class GenerationMetrics(ModelMetrics):
    """A ``generate`` model's series: the shared ones plus TTFT, inter-token time and the scheduler's
    gauges (read from ``scheduler`` at scrape time). ``tokens/s`` is generated tokens."""

    def __init__(self, server: ServerMetrics, name: str, scheduler: GenerationScheduler, memory_bytes: int):
        super().__init__(server, name, lambda: scheduler.queue_depth, memory_bytes)
        s = server
        self.ttft, self.inter_token = s.ttft.labels(name), s.inter_token.labels(name)
        self.generated_tokens, self.prompt_tokens = s.generated_tokens.labels(name), s.prompt_tokens.labels(name)
        self.step_seconds = s.step_seconds.labels(name)
        s.running_sequences.labels(name).set_function(lambda: scheduler.n_running)
        s.waiting_sequences.labels(name).set_function(lambda: scheduler.queue_depth)
        s.kv_cache_bytes.labels(name).set_function(lambda: scheduler.kv_bytes_used)
        self._prefix = scheduler.prefix
        self._prefix_counters = {k: c.labels(name) for k, c in s.prefix_cache.items()}
        self._prefix_seen = dict.fromkeys(self._prefix_counters, 0)
        self.prefill_computed = s.prefill_computed.labels(name)

    def observe_step(self, info: StepInfo) -> None:
        """Called on the scheduler thread after every step (``scheduler.generation.StepInfo``)."""
        self.step_seconds.observe(info.seconds)
        self.prefill_computed.inc(info.prefill_tokens)
        for key, counter in self._prefix_counters.items():  # the index counts; the counters follow its deltas
            now = getattr(self._prefix, key)
            if now > self._prefix_seen[key]:
                counter.inc(now - self._prefix_seen[key])
                self._prefix_seen[key] = now
        if info.sampled:
            self.generated_tokens.inc(info.sampled)
            self.observe_tokens(info.sampled)

    def finished(self, reason: str) -> None:
        self.server.finished.labels(self.name, reason).inc()


class LatencyWindow:
    """The last N successful embeddings requests; P50/P99 per input-length bucket on demand."""

    def __init__(self, size: int):
        self._rows: deque[tuple[str, dict[str, float]]] = deque(maxlen=size)
        self.size = size

    def add(self, length_bucket: str, stages: dict[str, float]) -> None:
        self._rows.append((length_bucket, stages))

    def table(self) -> dict[str, Any]:
        rows = list(self._rows)
        out: dict[str, dict[str, Any]] = {}
        for label in (*LENGTH_LABELS, "all"):
            picked = [s for b, s in rows if label in ("all", b)]
            entry: dict[str, object] = {"count": len(picked)}
            if picked:
                for stage in STAGES:
                    values = np.array([s[stage] for s in picked if stage in s]) * 1000.0
                    if values.size:
                        entry[stage] = {
                            "p50_ms": round(float(np.percentile(values, 50)), 3),
                            "p99_ms": round(float(np.percentile(values, 99)), 3),
                        }
            out[label] = entry
        return {"window": self.size, "requests": len(rows), "by_length": out}
