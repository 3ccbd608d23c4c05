"""Every server knob in one frozen dataclass, with the defaults `openhood serve` uses.

Kept separate from the CLI so tests and the load-test tooling build a server without argparse.
Defaults favour a 2-core CPU box serving short sentences: small waits (latency first), a batch
token budget that keeps one batch under ~0.1-0.2 s of engine time, and a queue bound that turns
overload into fast 429s instead of unbounded latency.
"""

from __future__ import annotations

from dataclasses import dataclass

# Derived with `openhood buckets --corpus dev_corpus.jsonl` (LengthBuckets.from_lengths): the
# dev corpus has P50=43, P80=77, P95=159 tokens, so 81% of requests land in the first two
# buckets (see docs/server.md). Clipped to the model's max length at start-up.
DEFAULT_BUCKETS = (48, 80, 160, 256)


@dataclass(frozen=True)
class ServerConfig:
    model: str | None = None  # HF folder; None = bundled all-MiniLM-L6-v2
    backend: str = "numpy"
    precision: str = "fp32"
    threads: int | None = None  # engine intra-op threads; None = every core
    host: str = "127.0.0.1"
    port: int = 8000

    max_batch_size: int = 32
    # Tuned with `openhood loadtest` (docs/benchmarks.md, run 3): on these 2 cores the engine does
    # ~2-3 padded tokens/ms, so 8192 tokens meant multi-second batches that short requests queued
    # behind; ~1024 keeps a batch near 0.3-0.5 s, and a 2 ms wait costs a lone request little.
    max_batch_tokens: int = 1024  # padded B x T per engine call
    max_wait_ms: float = 2.0
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    pad_to: str = "longest"  # "longest" in the batch (within its bucket) or "bucket" (static shapes)
    max_queue: int = 1024  # queued sequences, not requests
    max_inputs_per_request: int = 256
    max_body_bytes: int = 2 * 1024 * 1024
    truncate: bool = True  # False: too-long inputs get 413 instead of being truncated

    api_key: str | None = None
    grace_period_s: float = 30.0
    health_timeout_s: float = 5.0
    stall_timeout_s: float = 30.0  # worker inside one batch longer than this → not ready
    stats_window: int = 2048  # requests kept for /stats percentiles
    log_level: str = "info"

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batch_tokens", "max_queue", "max_inputs_per_request", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.max_wait_ms < 0 or self.grace_period_s < 0:
            raise ValueError("max_wait_ms and grace_period_s must be >= 0")
        if self.pad_to not in ("longest", "bucket"):
            raise ValueError(f"pad_to must be 'longest' or 'bucket', got {self.pad_to!r}")
