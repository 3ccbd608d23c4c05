"""The ``classify`` task: feature vectors (or small grey images) → an MLP from ``openhood train`` → probabilities.

Pieces, per the served-model contract (``models.served``):

- ``FeaturePreprocessor``: ``prepare`` checks each input on its own: a flat list of
  ``n_features`` numbers, or — for a model trained on images — an (H, W) nested list of that
  image shape (the 8×8 digits as ``load_digits`` gives them, 0–16). Booleans, strings, ragged
  rows, the wrong count, NaN and values that overflow float32 are ``BadFeatures`` naming the
  index, before anything is queued, so one bad input never reaches (or fails) a batch.
  Length 1 each: the batcher batches by count. ``collate`` stacks (B, F) float32.
- backend: ``engine.models.mlp.load_mlp``'s graph (scaler folded into the first layer; Linear+ReLU
  and Linear+Softmax fused by ``prepare_graph``), NumPy or ONNX Runtime.
- ``Probabilities``: the backend's ``probs`` (B, classes) as the rows; the route picks labels.

The trade-off: inputs are JSON numbers checked in Python, O(features) per item; at 784
features that is ~50 µs, small beside the HTTP request around it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from openhood.models.options import EngineOptions
from openhood.models.registry import ModelSpecError
from openhood.models.served import OutputSpec, Prepared, ServedModel
from openhood.models.tasks import Task

TASK = Task.CLASSIFY
FLOAT32_MAX = float(np.finfo(np.float32).max)


class BadFeatures(ValueError):
    """Input ``index`` is not a valid feature vector; the message says why."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"input[{index}]: {reason}")
        self.index = index


def _numbers(index: int, values: list, where: str) -> None:
    for j, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise BadFeatures(index, f"{where}[{j}] is {type(v).__name__}, not a number")
        if not (math.isfinite(v) and abs(v) <= FLOAT32_MAX):
            raise BadFeatures(index, f"{where}[{j}] is {v!r}: features must be finite float32 values")


class FeaturePreprocessor:
    max_length = 1  # fixed-shape items: one bucket, batches by count

    def __init__(self, n_features: int, image_shape: tuple[int, int] | None, input_name: str):
        self.n_features = n_features
        self.image_shape = image_shape
        self.input_name = input_name
        self.probe_input = [0.0] * n_features

    def check(self, index: int, item: object) -> np.ndarray:
        """One JSON input → (F,) float32, or ``BadFeatures``."""
        if not isinstance(item, list) or not item:
            raise BadFeatures(index, f"must be a non-empty list of {self.n_features} numbers")
        if isinstance(item[0], list):  # an image as rows
            shape = self.image_shape
            if shape is None:
                raise BadFeatures(index, f"this model takes a flat list of {self.n_features} numbers, not nested lists")
            if len(item) != shape[0] or any(not isinstance(r, list) or len(r) != shape[1] for r in item):
                raise BadFeatures(index, f"an image must be {shape[0]} rows of {shape[1]} numbers")
            for r, row in enumerate(item):
                _numbers(index, row, f"[{r}]")
            flat = [v for row in item for v in row]
        else:
            if len(item) != self.n_features:
                raise BadFeatures(index, f"has {len(item)} features, the model takes {self.n_features}")
            _numbers(index, item, "")
            flat = item
        return np.asarray(flat, dtype=np.float32)

    def prepare(self, inputs: Sequence[object]) -> Prepared:
        payloads = [self.check(i, item) for i, item in enumerate(inputs)]
        return Prepared(payloads, [1] * len(payloads), np.zeros(len(payloads), dtype=bool))

    def collate(self, payloads: list[np.ndarray], padded_len: int) -> dict[str, np.ndarray]:
        return {self.input_name: np.stack(payloads)}  # (B, F) float32

    def dummy(self, length: int) -> np.ndarray:
        return np.zeros(self.n_features, dtype=np.float32)


class Probabilities:
    """Backend outputs → (B, classes) class probabilities; ``labels`` maps class index → name."""

    def __init__(self, labels: list[str]):
        self.labels = labels
        self.classes = len(labels)

    def __call__(self, outputs: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> np.ndarray:
        return outputs["probs"].astype(np.float32, copy=False)


def load_classifier(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.backends import load_backend, prepare_graph
    from openhood.engine.models.mlp import INPUT_NAME, load_mlp

    if options.precision != "fp32":
        raise ModelSpecError(f"model {name!r}: the MLP classifier runs in fp32 only (asked for {options.precision})")
    mlp = load_mlp(folder)

    def graph():
        return prepare_graph(mlp.graph(), fusion=options.fusion)

    first = load_backend(options.backend, graph, threads=options.threads)
    backends = [first] + [first.replicate() for _ in range(options.workers - 1)]
    labels = mlp.labels
    sizes = mlp.config["sizes"]
    return ServedModel(
        name=name,
        task=TASK,
        folder=folder,
        preprocessor=FeaturePreprocessor(mlp.n_features, mlp.image_shape, INPUT_NAME),
        backends=backends,
        postprocessor=Probabilities(labels),
        labels=tuple(labels),
        output=OutputSpec((len(labels),)),
        info={
            "backend": first.name,
            "precision": "fp32",
            "architecture": "mlp",
            "sizes": sizes,
            "features": mlp.n_features,
            "classes": len(labels),
            "image_shape": list(mlp.image_shape) if mlp.image_shape else None,
        },
    )
