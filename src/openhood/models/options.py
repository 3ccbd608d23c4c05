"""``EngineOptions``: how a model runs (backend, precision, threads, workers, fusion).

Its own module because both the loader table (``models.loading``) and every task's loader
(``models.embed``, ``models.image_classify``, …) need it: kept in ``loading`` it tied them in an
import circle. A frozen dataclass, so a per-model override is ``dataclasses.replace`` and never
a shared mutation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineOptions:
    """How to run a model: backend, precision, intra-op threads, one backend per worker."""

    backend: str = "numpy"
    precision: str = "fp32"
    threads: int | None = None
    workers: int = 1
    fusion: bool = True
