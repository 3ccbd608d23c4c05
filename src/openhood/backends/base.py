"""The ``Backend`` protocol: what a served model needs from an engine, and nothing more.

A backend runs one compiled model: named arrays in, named arrays out. It does not know the
task (no tokenizer, no pooling, no top-k: those are the model's pre- and postprocessors in
``openhood.models``) nor the architecture beyond the graph it was given, so the NumPy engine,
ONNX Runtime and the int8 variants of both are swapped by name. The trade-off: every backend
returns its raw outputs (e.g. token states), so the postprocessor does work an exported graph
could have fused (pooling is ~1% of a forward pass).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Backend(Protocol):
    name: str  # "numpy" | "onnxruntime"
    precision: str  # "fp32" | "fp16" | "int8"
    input_names: tuple[str, ...]  # e.g. ("input_ids", "attention_mask")
    output_names: tuple[str, ...]  # e.g. ("token_embeddings",)

    @property
    def threads(self) -> int:
        """Intra-op threads of one run (the warm-up gives each its own row)."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One forward pass on a batch: every name of ``input_names`` → every name of ``output_names``."""
        ...

    def replicate(self, threads: int | None = None) -> Backend:
        """Another instance of the same model and precision, for another worker thread (the
        server runs one per worker, plus a wide one for lone requests), with ``threads`` intra-op
        threads (None: this one's). Shares what it safely can with this one."""
        ...

    def close(self) -> None:
        """Release thread pools and sessions; the backend is unusable afterwards."""
        ...


@runtime_checkable
class Resumable(Protocol):
    """A forward pass in steps of one layer group (an optional entry: ``backend.start(feeds)``,
    ``resumable_start``). ONNX Runtime runs a whole graph per call and has none: with it the
    scheduler never preempts."""

    @property
    def steps(self) -> int: ...

    def step(self) -> bool:
        """Run the next layer group; True when the pass is complete."""
        ...

    def result(self) -> dict[str, np.ndarray]:
        """Every name of ``output_names`` → its array, once complete."""
        ...

    def close(self) -> None:
        """Drop the pass's activations (it will not be resumed)."""
        ...


def resumable_start(backend: Backend) -> Callable[[Mapping[str, np.ndarray]], Resumable] | None:
    """The backend's ``start(feeds)`` when it can run a pass in steps, else None."""
    start = getattr(backend, "start", None)
    return start if callable(start) else None


def check_feeds(feeds: Mapping[str, np.ndarray], input_names: tuple[str, ...]) -> None:
    """Every input present, all with the same batch size: a wrong feed fails here with a clear
    message instead of deep inside a kernel."""
    missing = [n for n in input_names if n not in feeds]
    if missing:
        raise ValueError(f"missing inputs {missing}; the model takes {list(input_names)}")
    batch = {n: np.shape(feeds[n])[0] if np.ndim(feeds[n]) else None for n in input_names}
    if len(set(batch.values())) != 1 or None in batch.values():
        raise ValueError(f"inputs disagree on the batch size: {batch}")
