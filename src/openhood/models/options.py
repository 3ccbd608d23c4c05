"""``EngineOptions``: how a model runs (backend, precision, threads, workers, fusion, the wide
engine), and ``engine_backends``: the backend instances those options ask for (with ``auto``,
the ones ``backends.auto`` measured fastest on this machine for lone requests and for batches).

Its own module because both the loader table (``models.loading``) and every task's loader
(``models.embed``, ``models.image_classify``, …) need it: kept in ``loading`` it tied them in an
import circle. A frozen dataclass, so a per-model override is ``dataclasses.replace`` and never
a shared mutation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openhood.backends import Backend
    from openhood.backends.auto import Feeds
    from openhood.engine.graph.graph import Graph


@dataclass(frozen=True)
class EngineOptions:
    """How to run a model: backend, precision, intra-op threads, one backend per worker, and
    optionally one more with ``wide_threads`` threads for a lone request on an idle server."""

    backend: str = "numpy"  # or "auto": measured per model and shape (backends.auto)
    precision: str = "fp32"
    threads: int | None = None
    workers: int = 1
    fusion: bool = True
    wide_threads: int | None = None  # None: no wide engine (the workers' engines already use every core)
    batch_rows: int = 32  # rows of a full batch (the server's max batch size): the shape ``auto`` times
    # A server's decoder weights (engine.models.llama.WEIGHT_MODES): "float32" dequantizes at load
    # for BLAS sgemm, "quantized" keeps the GGUF's blocks for the packed kernels (~1/5 of the
    # weights' memory). float32 by measurement: 16 streams 103.1 against 63.8 output tokens/s, TTFT
    # P50 392 against 773 ms, at 953 against 419 MiB peak RSS (benchmarks/generation_serving.py,
    # docs/decoder.md § Weights). `openhood generate` (one stream) keeps generate.DEFAULT_WEIGHTS,
    # the quantized blocks.
    decoder_weights: str = "float32"


def worker_backends(first: Backend, options: EngineOptions) -> tuple[list[Backend], Backend | None]:
    """``first`` and its replicas, one per worker (no backend is ever called from two threads at
    once), and the wide engine (``wide_threads`` threads) when asked for."""
    backends = [first] + [first.replicate() for _ in range(options.workers - 1)]
    wide = first.replicate(options.wide_threads) if options.wide_threads else None
    return backends, wide


def engine_backends(
    folder: Path, build_graph: Callable[[], Graph], feeds: Feeds, options: EngineOptions
) -> tuple[list[Backend], Backend | None, dict]:
    """The workers' backends, the lone-request (wide) engine or None, and the model's ``info``
    entries about them. A named backend serves every shape; ``auto`` takes the measured winners:
    the batch winner on the workers, the lone winner as the wide engine (also without
    ``wide_threads`` when the two winners differ, then at the workers' thread count).
    ``feeds(rows, length)``: the model's inputs of that shape, for the timing."""
    from openhood.backends import load_backend
    from openhood.backends.auto import AUTO, choose

    if options.backend != AUTO:
        first = load_backend(options.backend, build_graph, precision=options.precision, threads=options.threads)
        backends, wide = worker_backends(first, options)
        return backends, wide, {"backend": first.name}
    verdict, batch, lone = choose(
        folder,
        build_graph,
        feeds,
        precision=options.precision,
        threads=options.threads,
        lone_threads=options.wide_threads,
        batch_rows=options.batch_rows,
    )
    backends = [batch] + [batch.replicate() for _ in range(options.workers - 1)]
    return backends, (None if lone is batch else lone), {"backend": batch.name, "backend_choice": verdict.describe()}
