"""Every server knob in one frozen dataclass, with the defaults `openhood serve` uses.

Kept separate from the CLI so tests and the load-test tooling build a server without argparse.
The batching knobs' defaults are ``scheduler.BatchPolicy``'s (one copy); they apply to every
served model, each of which gets its own queue, buckets (clipped to its max length) and workers.
Which models to serve is not here: ``openhood serve --model``/``--config`` loads them
(``openhood.models``) and hands them to ``create_app``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openhood.models.options import EngineOptions
from openhood.scheduler.policy import BatchPolicy, GenerationPolicy

_P = BatchPolicy  # the defaults below are the policy's, read from its class

# Derived with `openhood buckets --corpus dev_corpus.jsonl` (LengthBuckets.from_lengths): the
# dev corpus has P50=43, P80=77, P95=159 tokens, so 81% of requests land in the first two
# buckets (see docs/server.md). Clipped to the model's max length at start-up.
DEFAULT_BUCKETS = (48, 80, 160, 256)


@dataclass(frozen=True)
class ServerConfig:
    backend: str = "auto"  # for every model that does not name its own (TOML `backend`)
    precision: str = "fp32"
    decoder_weights: str = EngineOptions.decoder_weights  # generation models: "quantized" or "float32"
    # Inference worker threads per model, each with its own engine instance; None = 2 where there
    # are 2+ cores. Measured with `openhood loadtest` (docs/benchmarks.md): two 1-thread engines let
    # a short request start while a long batch holds the other core.
    workers: int | None = None
    threads: int | None = None  # intra-op threads per engine; None = the cores split over the workers
    # A lone request on an idle server runs on an extra engine with every core's threads
    # (scheduler's wide path; docs/server.md "Adaptive parallelism"). Off: always the workers' engines.
    wide: bool = True
    host: str = "127.0.0.1"
    port: int = 8000

    max_batch_size: int = _P.max_batch_size
    # None: per-bucket budgets calibrated per model at start-up (scheduler/calibrate.py), BatchPolicy's
    # max_batch_tokens at a surge; a number: that budget always, no calibration.
    max_batch_tokens: int | None = None
    max_wait_ms: float = _P.max_wait_ms
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    pad_to: str = _P.pad_to
    priority: str = _P.priority
    max_age_ms: float = _P.max_age_ms
    short_lane_tokens: int = _P.short_lane_tokens
    wide_quiet_ms: float = _P.wide_quiet_ms
    preempt: bool = _P.preempt  # layer-granular preemption (NumPy backend only; ONNX Runtime cannot yield)
    max_queue: int = _P.max_queue  # queued items per model, not requests
    # Queued tokens per model; None: what the engine drains in 80% of the grace period, measured at
    # start-up (lifecycle.queue_token_cap), so a full queue never outlasts a drain. A request
    # holding more is 413, a queue without room for it 429.
    max_queue_tokens: int | None = None
    # TEI's names: --max-client-batch-size and --payload-limit. A request's inputs are queued as
    # separate sequences, so they are split over batches and reassembled in order; one request
    # may hold at most --max-queue of them (more wait for 429 retries), hence the equal defaults.
    max_inputs_per_request: int = _P.max_queue
    max_body_bytes: int = 2 * 1024 * 1024
    truncate: bool = True  # False: too-long inputs get 413 instead of being truncated
    # Decoded-pixel memory across every in-flight image (server/pixel_budget.py): each image reserves
    # its decode's peak bytes from its header; one that does not fit waits image_wait_s, then 503.
    # 1.5 GiB admits one image of any 8-bit kind up to data.image.MAX_PIXELS (64 Mpx × 20 bytes at the
    # peak for a transparent PNG; an RGB JPEG needs 7, an RGB PNG 4): only 16-bit ones that large get 413.
    image_memory_mb: int = 1536
    image_wait_s: float = 30.0

    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or error

    # Connection hygiene (server/limits.py; docs/server.md § Connection limits). A production HTTP
    # server's usual bounds: nginx-like head sizes, a head and a body deadline, a short keep-alive
    # idle time and a cap on open connections well below the usual 1024 file descriptors.
    max_connections: int = 512
    max_header_bytes: int = 32 * 1024  # request line + headers
    max_headers: int = 100
    max_request_line: int = 8 * 1024
    header_timeout_s: float = 10.0  # connection open (or previous response) → complete head
    body_timeout_s: float = 10.0  # head complete → complete body; else 408
    keep_alive_timeout_s: int = 5  # idle keep-alive connection → closed (uvicorn takes whole seconds)
    grace_period_s: float = 30.0
    health_timeout_s: float = 5.0
    stall_timeout_s: float = 30.0  # worker inside one batch longer than this → not ready
    stats_window: int = 2048  # requests kept for /stats percentiles
    log_level: str = "info"
    # /debug/memory (and tracemalloc, which slows every allocation): off unless asked (docs/soak.md)
    debug_endpoints: bool = False
    # The `generate` task's step scheduler (running slots, KV-cache budget, prefill chunk, limits).
    generation: GenerationPolicy = field(default_factory=GenerationPolicy)

    def __post_init__(self) -> None:
        self.batch_policy()  # validates the batching knobs (ValueError)
        for name in (
            "max_inputs_per_request",
            "max_body_bytes",
            "image_memory_mb",
            "max_connections",
            "max_header_bytes",
            "max_headers",
            "max_request_line",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.grace_period_s < 0:
            raise ValueError("grace_period_s must be >= 0")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty; unset it to run without auth")

    def batch_policy(self) -> BatchPolicy:
        return BatchPolicy(
            max_batch_size=self.max_batch_size,
            max_batch_tokens=self.max_batch_tokens or _P.max_batch_tokens,
            max_wait_ms=self.max_wait_ms,
            max_queue=self.max_queue,
            pad_to=self.pad_to,
            priority=self.priority,
            max_age_ms=self.max_age_ms,
            short_lane_tokens=self.short_lane_tokens,
            wide_quiet_ms=self.wide_quiet_ms,
            preempt=self.preempt,
        )

    def worker_count(self, cores: int) -> int:
        return self.workers if self.workers is not None else min(2, max(1, cores))

    def engine_threads(self, cores: int) -> int:
        """Intra-op threads for each worker's engine: ``threads`` if set, else the cores shared out."""
        return self.threads if self.threads is not None else max(1, cores // self.worker_count(cores))

    def wide_threads(self, cores: int) -> int | None:
        """Threads of the wide engine: every core, when the workers' engines have fewer (else None)."""
        return cores if self.wide and self.engine_threads(cores) < cores else None
