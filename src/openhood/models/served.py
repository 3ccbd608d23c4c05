"""``ServedModel``: a task's preprocessor → backend (one per worker) → postprocessor, as one unit.

This is the seam between the server/scheduler and the model families. The server sees a name,
a task, ``prepare`` (raw inputs → items with a length each), ``run(worker, payloads, T)`` (one
batch → one output row per item) and ``probe(worker)`` (a tiny real inference, checked against
the model's own ``OutputSpec``); it never sees an architecture. The pieces:

- the preprocessor (``models.text.TextPreprocessor``; images or feature vectors later) turns a
  request's inputs into payloads + lengths, and a batch of payloads into the backend's feeds;
- the backends (``openhood.backends``): one instance per worker thread, never shared;
- the postprocessor (``models.pooling.MeanPooling``; softmax + top-k later) turns the backend's
  named outputs into one row per item;
- ``OutputSpec``: what a healthy row looks like (shape, finite, unit norm only when the model
  normalizes), which is what readiness checks.

The trade-off: one object carries the whole path, so a task added later brings its own
preprocessor/postprocessor pair and reuses the rest (batcher, readiness, metrics) unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from openhood.backends import Backend, Resumable, resumable_start
from openhood.models.tasks import Task

NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Prepared:
    """A request's inputs after preprocessing: one payload and one length (cost) per input."""

    payloads: list[Any]  # e.g. (L,) int token ids
    lengths: list[int]  # tokens; 1 for fixed-shape inputs
    truncated: np.ndarray  # (n,) bool: the input was cut to the model's max length


class Preprocessor(Protocol):
    max_length: int  # the largest length an item can have (the last batching bucket)
    probe_input: Any  # a tiny valid raw input for readiness

    def prepare(self, inputs: Sequence[Any]) -> Prepared:
        """Raw inputs → payloads; ValueError names an input that cannot be preprocessed."""
        ...

    def collate(self, payloads: list[Any], padded_len: int) -> dict[str, np.ndarray]:
        """A batch of payloads → the backend's feeds, padded to ``padded_len``."""
        ...

    def dummy(self, length: int) -> Any:
        """A payload of ``length`` (for warming each bucket up before serving)."""
        ...


def dummy_feeds(preprocessor: Preprocessor) -> Callable[[int, int], dict[str, np.ndarray]]:
    """``(rows, length)`` → a batch of dummy payloads as the backend's feeds (for timing a shape)."""
    return lambda rows, length: preprocessor.collate([preprocessor.dummy(length)] * rows, length)


Postprocessor = Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], np.ndarray]  # (outputs, feeds) → (B, ...)


@dataclass(frozen=True)
class OutputSpec:
    """What one healthy output row looks like; the readiness probe checks a real row against it."""

    shape: tuple[int, ...]  # e.g. (384,)
    unit_norm: bool = False  # only models that L2-normalize promise norm 1

    def check(self, row: np.ndarray) -> None:
        if row.shape != self.shape:
            raise RuntimeError(f"probe output has shape {row.shape}, expected {self.shape}")
        if not np.isfinite(row).all():
            raise RuntimeError("probe output is not finite")
        if self.unit_norm:
            norm = float(np.linalg.norm(row))
            if abs(norm - 1.0) > NORM_TOLERANCE:
                raise RuntimeError(f"probe output norm is {norm:.6f}, expected 1")


class Served(Protocol):
    """What the server needs of anything it serves, whatever its task and scheduler: the name
    and aliases it is routed by, its task, readiness (``probe``, a tiny real inference on the
    calling worker's engine), its ``/v1/models`` entry and its metrics' facts. ``ServedModel``
    (single-pass tasks) and ``models.generation.ServedGenerator`` (``generate``) implement it."""

    name: str
    task: Task
    info: dict
    memory_bytes: int
    buckets: tuple[int, ...] | None

    @property
    def aliases(self) -> set[str]: ...

    @property
    def max_length(self) -> int: ...

    @property
    def workers(self) -> int: ...

    def probe(self, worker: int) -> dict: ...

    def describe(self) -> dict: ...

    def close(self) -> None: ...


def model_entry(name: str, task: str, max_length: int, info: dict) -> dict:
    """A served model's /v1/models entry: OpenAI's shape plus openhood's facts (every task's)."""
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "openhood",
        "task": task,
        "max_length": max_length,
        **info,
    }


@dataclass
class ServedModel:
    name: str  # public id: the request's "model" field, /v1/models, the metrics' model label
    task: Task
    folder: Path
    preprocessor: Preprocessor
    backends: list[Backend]  # backends[i] belongs to worker i
    postprocessor: Postprocessor
    output: OutputSpec
    info: dict = field(default_factory=dict)  # backend, precision, dim, …: for /v1/models and logs
    # An engine with every core's threads for a lone batch on an idle server (scheduler's wide
    # path); None when the workers' engines already use every core.
    wide: Backend | None = None
    memory_bytes: int = 0  # process memory the load added (RSS delta), reported at start-up
    buckets: tuple[int, ...] | None = None  # batching buckets of its own (model file); None = the server's
    labels: tuple[
        str, ...
    ] = ()  # class index → name, for the classifying tasks (their rows start with the probabilities)

    @property
    def aliases(self) -> set[str]:
        """Accepted values of a request's ``model`` field: the name and its last path part."""
        return {self.name, self.name.rsplit("/", 1)[-1]}

    @property
    def max_length(self) -> int:
        return self.preprocessor.max_length

    @property
    def workers(self) -> int:
        return len(self.backends)

    def run(self, worker: int, payloads: list[Any], padded_len: int, *, wide: bool = False) -> np.ndarray:
        """One batch on worker ``worker``'s backend (or the wide one) → (B, ...) rows (called on
        that worker's thread; the scheduler lets one thread at a time use the wide backend)."""
        return self.run_feeds(worker, self.preprocessor.collate(payloads, padded_len), wide=wide)

    def run_feeds(self, worker: int, feeds: dict[str, np.ndarray], *, wide: bool = False) -> np.ndarray:
        """Already-collated feeds (e.g. a padded batch a benchmark built) → backend → postprocessor."""
        backend = self.wide if wide and self.wide is not None else self.backends[worker]
        return self.postprocessor(backend.run(feeds), feeds)

    def runner(self, worker: int) -> Callable[[list[Any], int], np.ndarray]:
        """``run`` bound to one worker: the scheduler's per-worker function."""
        return lambda payloads, padded_len: self.run(worker, payloads, padded_len)

    def starter(self, worker: int) -> Callable[[list[Any], int], BatchPass] | None:
        """One batch on worker ``worker``'s backend as a pass in layer groups (the scheduler's
        per-worker ``start`` for preemption), None when the backend cannot yield (ONNX Runtime)."""
        start = resumable_start(self.backends[worker])
        if start is None:
            return None

        def begin(payloads: list[Any], padded_len: int) -> BatchPass:
            feeds = self.preprocessor.collate(payloads, padded_len)
            return BatchPass(start(feeds), feeds, self.postprocessor)

        return begin

    def wide_runner(self) -> Callable[[list[Any], int], np.ndarray] | None:
        """``run`` on the wide backend (the scheduler's ``wide_run``), None without one."""
        if self.wide is None:
            return None
        return lambda payloads, padded_len: self.run(0, payloads, padded_len, wide=True)

    def probe(self, worker: int) -> dict:
        """A real one-item inference on ``worker``'s backend, checked against ``output``; raises
        when the model is not healthy."""
        t0 = time.perf_counter()
        prepared = self.preprocessor.prepare([self.preprocessor.probe_input])
        out = np.asarray(self.run(worker, prepared.payloads, prepared.lengths[0]))
        self.output.check(out[0])
        return {"probe_ms": round((time.perf_counter() - t0) * 1000, 3), "worker": worker}

    def warm_up(self, worker: int, lengths: Sequence[int], *, wide: bool = False) -> None:
        """One call per padded length (bucket), one row per intra-op thread, so the first requests
        pay no first-call costs and every thread's scratch buffers reach their per-row size for
        every length at start-up. (A scratch buffer grows to the largest shape its thread has
        seen; warmed with one row, the wide engine's second thread first met a long input in a
        lone multi-input request mid-soak, and the soak counted its 3 MB as growth.)"""
        backend = self.wide if wide and self.wide is not None else self.backends[worker]
        rows = max(1, int(backend.threads))
        for length in lengths:
            self.run(worker, [self.preprocessor.dummy(length)] * rows, length, wide=wide)

    def describe(self) -> dict:
        """The /v1/models entry (OpenAI's shape plus openhood's facts)."""
        return model_entry(self.name, self.task, self.max_length, self.info)

    def close(self) -> None:
        for backend in [*self.backends, *([self.wide] if self.wide is not None else [])]:
            backend.close()


class BatchPass:
    """A batch's forward pass in steps, its postprocessor applied at the end: ``result()`` is
    what ``ServedModel.run`` returns for the same batch, bit for bit (same engine, same order)."""

    def __init__(self, resumable: Resumable, feeds: dict[str, np.ndarray], postprocessor: Postprocessor):
        self._resumable = resumable
        self._feeds: dict[str, np.ndarray] | None = feeds
        self._postprocessor = postprocessor

    @property
    def steps(self) -> int:
        return self._resumable.steps

    def step(self) -> bool:
        return self._resumable.step()

    def result(self) -> np.ndarray:
        assert self._feeds is not None, "the pass was closed"
        return self._postprocessor(self._resumable.result(), self._feeds)

    def close(self) -> None:
        self._resumable.close()
        self._feeds = None
