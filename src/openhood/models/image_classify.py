"""The ``image-classify`` task: image bytes → decode/resize/crop → CNN → probabilities + features.

For folders written by ``openhood convert`` (EfficientNet-Lite0). Pieces, per the served-model
contract (``models.served``):

- ``ImagePreprocessor``: ``prepare`` decodes each image in this process (``data.image.preprocess``:
  EXIF orientation, modes, bomb refusal from the header) to a uint8 (224, 224, 3) crop, length 1
  each (fixed shape: the batcher batches by count); ``collate`` stacks and normalizes once per
  batch (float32 only at the last moment, 4× fewer bytes in the queue). A bad image raises
  ``BadImage`` naming its index and keeping the ``data.image`` error (the route maps it to
  415/422/413); it never reaches a batch, so it cannot fail its batch-mates. The server decodes
  in ``DecodePool`` worker processes instead: it reserves ``cost`` bytes (read from the header)
  per image, and hands the crops the workers return to ``prepared``.
- backend: the engine graph with the ``probs`` head (Linear+Softmax fused) and ``features``
  (the pooled 1280-d vector) as outputs, NumPy or ONNX Runtime.
- ``ClassifyAndEmbed``: one row per image, ``[probabilities (classes) | features (1280)]``
  concatenated, because the scheduler carries one array row per item; the classify route
  reads the first part, the embeddings route the second.

The trade-off: one batch computes both outputs even when a request wants one; the pooled
features are a by-product of classification (0.2% of the work).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from openhood.data import image
from openhood.data.image import ImageError, ImageSpec
from openhood.models.options import EngineOptions, worker_backends
from openhood.models.registry import ModelSpecError
from openhood.models.served import OutputSpec, Prepared, ServedModel
from openhood.models.tasks import Task

TASK = Task.IMAGE_CLASSIFY


class BadImage(ValueError):
    """Input ``index`` could not be decoded; ``error`` is the ``data.image`` error (its type says why)."""

    def __init__(self, index: int, error: ImageError):
        super().__init__(f"images[{index}]: {error}")
        self.index = index
        self.error = error


def _probe_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 160, 200)).save(buf, "JPEG")
    return buf.getvalue()


DECODE_WORKERS = 2  # decode processes per image model in a server: ~40 MB each when idle


def engine_cores(options: EngineOptions) -> int:
    """The cores the engines were sized for (the wide engine's threads, else workers × threads)."""
    return options.wide_threads or max(1, options.workers * (options.threads or 1))


class ImagePreprocessor:
    max_length = 1  # fixed-shape items: one bucket, batches by count

    def __init__(self, spec: ImageSpec, input_name: str, max_pixels: int = image.MAX_PIXELS, cores: int = 1):
        self.spec = spec
        self.input_name = input_name
        self.max_pixels = max_pixels
        # Decode processes for the server's pool: DECODE_WORKERS, fewer on a 1-core machine.
        self.decode_workers = max(1, min(DECODE_WORKERS, cores))
        self.probe_input = _probe_jpeg()

    def decode(self, index: int, data: bytes) -> np.ndarray:
        """One encoded image → uint8 (crop, crop, 3); ``BadImage`` when it cannot be."""
        try:
            return image.preprocess(data, self.spec, max_pixels=self.max_pixels)
        except ImageError as exc:
            raise BadImage(index, exc) from exc

    def cost(self, index: int, data: bytes) -> int:
        """Peak bytes decoding input ``index`` will hold, from its header; ``BadImage`` when the
        header alone already refuses it (not an image, a bomb)."""
        try:
            return image.decode_cost(data, self.spec, max_pixels=self.max_pixels)
        except ImageError as exc:
            raise BadImage(index, exc) from exc

    def prepare(self, inputs: Sequence[bytes]) -> Prepared:
        return self.prepared([self.decode(i, data) for i, data in enumerate(inputs)])

    def prepared(self, payloads: list[np.ndarray]) -> Prepared:
        """uint8 (crop, crop, 3) crops, however they were decoded → the batcher's items."""
        return Prepared(payloads, [1] * len(payloads), np.zeros(len(payloads), dtype=bool))

    def collate(self, payloads: list[np.ndarray], padded_len: int) -> dict[str, np.ndarray]:
        return {self.input_name: image.normalize(np.stack(payloads), self.spec)}  # (B, 224, 224, 3) float32

    def dummy(self, length: int) -> np.ndarray:
        return np.zeros(self.spec.shape, dtype=np.uint8)


class ClassifyAndEmbed:
    """Backend outputs → (B, classes + dim): probabilities, then the pooled features."""

    def __init__(self, labels: list[str], dim: int):
        self.labels = labels  # class index → name (config.json's id2label)
        self.classes, self.dim = len(labels), dim

    def __call__(self, outputs: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([outputs["probs"], outputs["features"]], axis=1).astype(np.float32, copy=False)

    def split(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return row[: self.classes], row[self.classes :]


def load_image_classifier(name: str, folder: Path, options: EngineOptions) -> ServedModel:
    from openhood.backends import load_backend, prepare_graph
    from openhood.engine.models.efficientnet import HEAD_WIDTH, INPUT_NAME, build_graph, load_efficientnet

    if options.precision != "fp32":
        raise ModelSpecError(f"model {name!r}: the image classifier runs in fp32 only (asked for {options.precision})")
    model = load_efficientnet(folder)

    def graph():
        return prepare_graph(build_graph(model.weights, model.config, head="probs"), fusion=options.fusion)

    first = load_backend(options.backend, graph, threads=options.threads)
    backends, wide = worker_backends(first, options)
    classes = int(model.config["num_classes"])
    labels = model.labels or [str(i) for i in range(classes)]
    post = ClassifyAndEmbed(labels, HEAD_WIDTH)
    return ServedModel(
        name=name,
        task=TASK,
        folder=folder,
        preprocessor=ImagePreprocessor(model.image_spec, INPUT_NAME, cores=engine_cores(options)),
        backends=backends,
        wide=wide,
        postprocessor=post,
        labels=tuple(post.labels),
        output=OutputSpec((classes + HEAD_WIDTH,)),
        info={
            "backend": first.name,
            "precision": "fp32",
            "architecture": model.config["architecture"],
            "classes": classes,
            "dim": HEAD_WIDTH,
        },
    )
