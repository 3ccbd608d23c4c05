"""Every server knob in one frozen dataclass, with the defaults `openhood serve` uses.

Kept separate from the CLI so tests and the load-test tooling build a server without argparse.
Defaults favour a 2-core CPU box serving short sentences: small waits (latency first), a batch
token budget that keeps one batch under ~0.1-0.2 s of engine time, and a queue bound that turns
overload into fast 429s instead of unbounded latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openhood.scheduler.batcher import PRIORITIES

# Derived with `openhood buckets --corpus dev_corpus.jsonl` (LengthBuckets.from_lengths): the
# dev corpus has P50=43, P80=77, P95=159 tokens, so 81% of requests land in the first two
# buckets (see docs/server.md). Clipped to the model's max length at start-up.
DEFAULT_BUCKETS = (48, 80, 160, 256)


@dataclass(frozen=True)
class ServerConfig:
    model: str | None = None  # HF folder; None = bundled all-MiniLM-L6-v2
    backend: str = "numpy"
    precision: str = "fp32"
    # Inference worker threads, each with its own engine instance; None = 2 where there are
    # 2+ cores. Measured with `openhood loadtest` (docs/benchmarks.md): two 1-thread engines let
    # a short request start while a long batch holds the other core.
    workers: int | None = None
    threads: int | None = None  # intra-op threads per engine; None = the cores split over the workers
    host: str = "127.0.0.1"
    port: int = 8000

    max_batch_size: int = 32
    # From benchmarks/batching.py (docs/benchmarks.md, "Batch size on this CPU"): per sentence, a
    # call of up to ~512 padded tokens is as cheap as it gets here (ONNX Runtime: 1.19x batch-1
    # throughput at 512, 1.14x at 1024, 0.93x at 4096) and it bounds how long a short request can
    # wait behind one batch; 8192 (the first default) meant multi-second batches.
    max_batch_tokens: int = 512  # padded B x T per engine call
    max_wait_ms: float = 2.0
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    pad_to: str = "longest"  # "longest" in the batch (within its bucket) or "bucket" (static shapes)
    priority: str = "shortest"  # which ready bucket first: "shortest" (age-capped) or "oldest"
    max_age_ms: float = 100.0  # with "shortest": a bucket whose head waited this long goes first
    # With 2+ workers: worker 0 only runs buckets up to this many tokens (0 = off), so short requests
    # (81% of the dev corpus is <= 80 tokens) always have a worker no long batch holds. Measured
    # with `openhood loadtest --sweep` (docs/benchmarks.md).
    short_lane_tokens: int = 80
    max_queue: int = 1024  # queued sequences, not requests
    max_inputs_per_request: int = 256
    max_body_bytes: int = 2 * 1024 * 1024
    truncate: bool = True  # False: too-long inputs get 413 instead of being truncated

    api_key: str | None = field(default=None, repr=False)  # never in a repr, log or error

    # Connection hygiene (server/limits.py; docs/server.md § Limits). A production HTTP server's
    # usual bounds: nginx-like head sizes, a head and a body deadline, a short keep-alive idle
    # time and a cap on open connections well below the usual 1024 file descriptors.
    max_connections: int = 512
    max_header_bytes: int = 32 * 1024  # request line + headers
    max_headers: int = 100
    max_request_line: int = 8 * 1024
    header_timeout_s: float = 10.0  # connection open (or previous response) → complete head
    body_timeout_s: float = 10.0  # head complete → complete body; else 408
    keep_alive_timeout_s: float = 5.0  # idle keep-alive connection → closed
    grace_period_s: float = 30.0
    health_timeout_s: float = 5.0
    stall_timeout_s: float = 30.0  # worker inside one batch longer than this → not ready
    stats_window: int = 2048  # requests kept for /stats percentiles
    log_level: str = "info"

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batch_tokens", "max_queue", "max_inputs_per_request", "max_body_bytes",
                     "max_connections", "max_header_bytes", "max_headers", "max_request_line"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {self.priority!r}")
        if self.short_lane_tokens < 0:
            raise ValueError(f"short_lane_tokens must be >= 0, got {self.short_lane_tokens}")
        if self.max_age_ms < 0:
            raise ValueError(f"max_age_ms must be >= 0, got {self.max_age_ms}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty; unset it to run without auth")
        if self.max_wait_ms < 0 or self.grace_period_s < 0:
            raise ValueError("max_wait_ms and grace_period_s must be >= 0")
        if self.pad_to not in ("longest", "bucket"):
            raise ValueError(f"pad_to must be 'longest' or 'bucket', got {self.pad_to!r}")

    def worker_count(self, cores: int) -> int:
        return self.workers if self.workers is not None else min(2, max(1, cores))

    def engine_threads(self, cores: int) -> int:
        """Intra-op threads for each worker's engine: ``threads`` if set, else the cores shared out."""
        return self.threads if self.threads is not None else max(1, cores // self.worker_count(cores))
