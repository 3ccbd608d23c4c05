"""``--backend auto``: time every available backend on this machine for the server's shapes,
keep the verdict per machine and model, and serve each shape with the faster.

Two shapes: a lone request (1 row, on the engine the scheduler gives a lone request: the wide
one's threads) and a full batch (``batch_rows`` rows on a worker's threads), both ``LENGTH``
tokens long; each backend is timed on each shape, runs interleaved so background load hits all
alike, the median kept. The verdict may differ per shape (ONNX Runtime for lone requests and the
NumPy engine for batches, say): the workers then run the batch winner and the lone-request
engine the lone winner. It is kept as an ``openhood.diskcache`` record (hash-checked, atomic,
in openhood's one cache directory) under a key of the machine (CPU model, usable cores), LLVM
CPU name, ISA level, the model files' names, sizes and mtimes, precision and shapes; a corrupt
record, or one naming a backend this build lacks, is ignored with one log line and measured again.

The trade-off: the first start of a model on a machine pays both backends' construction and a
few dozen forward passes (seconds) and one noisy measurement decides until the record is
deleted; later starts stat the model's files and build only the winners.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from openhood import diskcache
from openhood.backends import BACKENDS, load_backend
from openhood.formats.errors import ModelFileError

if TYPE_CHECKING:
    import numpy as np

    from openhood.backends.base import Backend
    from openhood.engine.graph.graph import Graph

AUTO = "auto"
LENGTH = 48  # tokens of the timed inputs: a short sentence padded to the server's first default bucket
REPEATS = {"lone": 9, "batch": 3}  # timed runs per backend and shape (after one warm-up each)
log = logging.getLogger("openhood.backends.auto")

Feeds = Callable[[int, int], Mapping[str, "np.ndarray"]]  # (rows, length) → the model's inputs


@dataclass(frozen=True)
class Shape:
    """One shape the server runs: ``rows`` × ``length`` on an engine of ``threads`` threads."""

    name: str  # "lone" | "batch"
    rows: int
    length: int
    threads: int | None


@dataclass
class Verdict:
    """The backend per shape, the medians (ms) behind it, and whether it came from the cache."""

    lone: str
    batch: str
    ms: dict[str, dict[str, float]]  # shape name → backend → median ms
    cached: bool = False
    shapes: dict[str, list[int | None]] = field(default_factory=dict)  # shape name → [rows, length, threads]

    def describe(self) -> dict:
        """For ``/info``, ``/v1/models`` and the log: which and why."""
        why = {
            s: ", ".join(f"{b} {ms:.2f} ms" for b, ms in sorted(per.items(), key=lambda kv: kv[1]))
            for s, per in self.ms.items()
        }
        return {
            "lone": self.lone,
            "batch": self.batch,
            "why": why,
            "shapes": self.shapes,
            "source": "cache" if self.cached else "measured at this start",
        }


KIND = "openhood.backends.auto/1"  # bump when the record's meaning changes


def cache_key(folder: Path, precision: str, shapes: list[Shape]) -> dict:
    """What a verdict depends on: the machine (CPU, cores, ISA level), the model and the shapes."""
    from openhood.engine.kernels import isa

    return {
        "kind": KIND,
        "machine": diskcache.machine_key(),
        "llvm_cpu": isa.host().llvm_cpu,
        "isa": isa.level().label,
        "files": diskcache.files_fingerprint(folder),
        "precision": precision,
        "shapes": {s.name: [s.rows, s.length, s.threads] for s in shapes},
    }


def read_cached(key: dict) -> Verdict | None:
    """The verdict stored for ``key``, or None (absent; corrupt or naming an unknown backend: one
    log line, measured again)."""
    value = diskcache.read(key)
    if value is None:
        return None
    try:
        verdict = Verdict(value["lone"], value["batch"], value["ms"], cached=True, shapes=key["shapes"])
        if verdict.lone not in BACKENDS or verdict.batch not in BACKENDS or not isinstance(verdict.ms, dict):
            raise ValueError("unknown backend name")
        return verdict
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("backend choice record corrupt (%s): measuring again", type(exc).__name__)
        return None


def write_cached(key: dict, verdict: Verdict) -> None:
    diskcache.write(key, {"lone": verdict.lone, "batch": verdict.batch, "ms": verdict.ms})


def _median_ms(backend: Backend, feeds: Mapping[str, np.ndarray]) -> Callable[[], float]:
    def once() -> float:
        t0 = time.perf_counter()
        backend.run(feeds)
        return (time.perf_counter() - t0) * 1e3

    return once


def measure(engines: dict[str, dict[str, Backend]], shapes: list[Shape], feeds: Feeds) -> dict[str, dict[str, float]]:
    """Median ms per shape and backend; ``engines[shape][backend]`` runs that shape. One warm-up
    run each, then ``REPEATS`` rounds, each round running every backend once (interleaved)."""
    ms: dict[str, dict[str, float]] = {}
    for shape in shapes:
        inputs = feeds(shape.rows, shape.length)
        runs = {name: _median_ms(engine, inputs) for name, engine in engines[shape.name].items()}
        for run in runs.values():
            run()
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(REPEATS[shape.name]):
            for name, run in runs.items():
                samples[name].append(run())
        ms[shape.name] = {name: round(statistics.median(s), 3) for name, s in samples.items()}
    return ms


def choose(
    folder: Path,
    build_graph: Callable[[], Graph],
    feeds: Feeds,
    *,
    precision: str,
    threads: int | None,
    lone_threads: int | None,
    batch_rows: int,
) -> tuple[Verdict, Backend, Backend]:
    """The verdict (cached or measured now) and the two engines it asks for: the batch winner at
    ``threads`` and the lone winner at ``lone_threads`` (the same object when both agree and the
    thread counts do). Backends that fail to build (a model ONNX cannot express) are left out."""
    shapes = [Shape("lone", 1, LENGTH, lone_threads or threads), Shape("batch", batch_rows, LENGTH, threads)]
    key = cache_key(folder, precision, shapes)
    verdict = read_cached(key)
    built: dict[str, Backend] = {}

    def base(name: str) -> Backend:
        if name not in built:
            built[name] = load_backend(name, build_graph, precision=precision, threads=threads)
        return built[name]

    if verdict is None:
        failures: list[Exception] = []
        for name in BACKENDS:
            try:
                base(name)
            except ModelFileError:  # the model's own file is unreadable: no backend can help
                raise
            except Exception as exc:  # any other failure means "not a candidate here"
                failures.append(exc)
                log.warning("backend %s unavailable for %s (%s: %s)", name, folder.name, type(exc).__name__, exc)
        if not built:
            # The first backend's own error (e.g. a damaged file, an int8 model without its plan: one
            # line and exit 2 from the command), not a generic one that would hide it.
            raise failures[0]
        lone = {n: (b if lone_threads in (None, threads) else b.replicate(lone_threads)) for n, b in built.items()}
        ms = measure({"lone": lone, "batch": dict(built)}, shapes, feeds)
        verdict = Verdict(
            lone=min(ms["lone"], key=ms["lone"].__getitem__),
            batch=min(ms["batch"], key=ms["batch"].__getitem__),
            ms=ms,
            shapes=key["shapes"],
        )
        write_cached(key, verdict)
        for name, engine in lone.items():
            if name != verdict.lone and engine is not built[name]:
                engine.close()
        lone_engine = lone[verdict.lone]
    else:
        lone_engine = base(verdict.lone)
        if lone_threads not in (None, threads):
            lone_engine = lone_engine.replicate(lone_threads)
    batch_engine = base(verdict.batch)
    for engine in built.values():
        if engine is not batch_engine and engine is not lone_engine:
            engine.close()
    log.info(
        "backend auto for %s: lone requests on %s, batches on %s (%s; %s)",
        folder.name,
        verdict.lone,
        verdict.batch,
        "; ".join(f"{s}: {w}" for s, w in verdict.describe()["why"].items()),
        verdict.describe()["source"],
    )
    return verdict, batch_engine, lone_engine
