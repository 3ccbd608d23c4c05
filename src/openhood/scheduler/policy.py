"""``BatchPolicy`` (the dynamic batcher) and ``GenerationPolicy`` (the generation scheduler): every
knob with the one set of defaults.

The server's config, ``openhood serve``'s flags and the batcher all read their defaults from
here, so they cannot drift apart again (the batcher once defaulted to an 8192-token budget
while the server used 512). Defaults favour a 2-core CPU box serving short sentences: small
waits (latency first), a token budget that keeps one batch under ~0.1-0.2 s of engine time,
and a queue bound that turns overload into fast 429s instead of unbounded latency.
"""

from __future__ import annotations

from dataclasses import dataclass

PRIORITIES = ("shortest", "oldest")
# The tail-latency objective (issue 12): P99 within this many times P50 in each length bucket.
# The load test checks it (loadtest.stats.Slo) and the token budget is calibrated for it
# (scheduler.calibrate).
TAIL_RATIO = 3.0
PAD_TO = ("longest", "bucket")


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int = 32  # rows per engine call
    # From benchmarks/batching.py (docs/benchmarks.md, "Batch size on this CPU"): per sentence, a
    # call of up to ~512 padded tokens is as cheap as it gets here (ONNX Runtime: 1.19x batch-1
    # throughput at 512, 1.14x at 1024, 0.93x at 4096) and it bounds how long a short request can
    # wait behind one batch; 8192 (the first default) meant multi-second batches. For fixed-shape
    # tasks (every item costs 1) it is a plain row cap like max_batch_size. `openhood serve`
    # replaces it at start-up by a budget calibrated on the model (scheduler/calibrate.py) unless
    # --max-batch-tokens is given.
    max_batch_tokens: int = 512  # padded B x T (sum of item costs at the padded length) per call
    max_wait_ms: float = 2.0  # how long the oldest item may wait for batch-mates
    max_queue: int = 1024  # queued items (sequences, not requests) before 429
    pad_to: str = "longest"  # "longest" in the batch (within its bucket) or "bucket" (static shapes)
    priority: str = "shortest"  # which ready bucket first: "shortest" (age-capped) or "oldest"
    max_age_ms: float = 100.0  # with "shortest": a bucket whose head waited this long goes first
    # With 2+ workers: worker 0 only runs buckets up to this many tokens (0 = off), so short requests
    # (81% of the dev corpus is <= 80 tokens) always have a worker no long batch holds. Measured
    # with `openhood loadtest --sweep` (docs/benchmarks.md).
    short_lane_tokens: int = 80
    # From this many queued items on, batches may fill max_batch_tokens in every bucket (a surge:
    # the backlog, not one batch, decides latency); below it each bucket has its calibrated
    # budget (scheduler.calibrate). 16 = several full small batches per worker of a 2-4 worker box.
    surge_items: int = 16
    # The wide engine (a lone batch on every core) only while traffic is sequential: no batch has
    # started beside another one, or with others queued, for this long. Under open-loop traffic a
    # wide batch holds both cores when the next request arrives, and it lowers P50 while the P99
    # stays: the tail ratio got worse (benchmarks/slo_model.py, docs/benchmarks.md). One client's
    # requests never overlap, so it keeps the wide engine. 0 = wide whenever the server is idle.
    wide_quiet_ms: float = 1000.0
    # Layer-granular preemption (scheduler.preemption): a running batch yields between layers to
    # a queued one with less work; only backends that can yield (NumPy) do. Measured in
    # docs/benchmarks.md, "Preemption".
    preempt: bool = True

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batch_tokens", "max_queue", "surge_items"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.max_age_ms < 0 or self.wide_quiet_ms < 0:
            raise ValueError("max_wait_ms, max_age_ms and wide_quiet_ms must be >= 0")
        if self.pad_to not in PAD_TO:
            raise ValueError(f"pad_to must be one of {PAD_TO}, got {self.pad_to!r}")
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {self.priority!r}")
        if self.short_lane_tokens < 0:
            raise ValueError(f"short_lane_tokens must be >= 0, got {self.short_lane_tokens}")


@dataclass(frozen=True)
class GenerationPolicy:
    """The generation scheduler's knobs (``scheduler.generation``; ``openhood serve --gen-*``).

    Defaults for a 2-core CPU and SmolLM2-135M (45 KiB of KV cache per token): 16 running
    sequences, a 512 MiB reservation budget (~11k positions: 16 sequences of ~700 tokens),
    prompts read at most 128 tokens per step, and while streams decode only as many as keep a step
    within 2 decode steps of the running batch (``scheduler.step_budget``: inter-token P99 near 2× P50).
    """

    max_running: int = 16  # KV-cache slots: sequences stepped together
    kv_cache_bytes: int = 512 * 2**20  # reserved (prompt + max_tokens) positions of running sequences
    max_waiting: int = 64  # sequences waiting for admission; more → 429
    prefill_chunk: int = 128  # prompt tokens per step, at most
    step_stretch: float = 2.0  # a step carrying prompt tokens lasts ≤ this × the batch's decode step; 0 = off
    max_context: int = 2048  # prompt + max_tokens of one sequence (clipped to the model's context)
    max_tokens: int = 1024  # the most a request may ask for
    timeout_s: float = 300.0  # a sequence running longer is finished with finish_reason "length"
    prefix_cache: bool = True  # reuse the KV of a prompt's longest prefix already in a slot (scheduler.prefix_cache)

    def __post_init__(self) -> None:
        for name in ("max_running", "kv_cache_bytes", "max_waiting", "prefill_chunk", "max_context", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.step_stretch != 0 and self.step_stretch < 1:
            raise ValueError(f"step_stretch must be 0 (off) or >= 1, got {self.step_stretch}")
