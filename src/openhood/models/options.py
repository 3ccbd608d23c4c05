"""``EngineOptions``: how a model runs (backend, precision, threads, workers, fusion, the wide
engine), and ``worker_backends``: the backend instances those options ask for.

Its own module because both the loader table (``models.loading``) and every task's loader
(``models.embed``, ``models.image_classify``, …) need it: kept in ``loading`` it tied them in an
import circle. A frozen dataclass, so a per-model override is ``dataclasses.replace`` and never
a shared mutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openhood.backends import Backend


@dataclass(frozen=True)
class EngineOptions:
    """How to run a model: backend, precision, intra-op threads, one backend per worker, and
    optionally one more with ``wide_threads`` threads for a lone request on an idle server."""

    backend: str = "numpy"
    precision: str = "fp32"
    threads: int | None = None
    workers: int = 1
    fusion: bool = True
    wide_threads: int | None = None  # None: no wide engine (the workers' engines already use every core)


def worker_backends(first: Backend, options: EngineOptions) -> tuple[list[Backend], Backend | None]:
    """``first`` and its replicas, one per worker (no backend is ever called from two threads at
    once), and the wide engine (``wide_threads`` threads) when asked for."""
    backends = [first] + [first.replicate() for _ in range(options.workers - 1)]
    wide = first.replicate(options.wide_threads) if options.wide_threads else None
    return backends, wide
