"""The ``Backend`` protocol: what the scheduler and ``Embedder`` need from an engine.

Deliberately tiny (one inference call, one health probe) so a backend is swapped by name:
our NumPy engine or ONNX Runtime running our exported graph. A backend takes a padded batch
and returns pooled, L2-normalized float32 embeddings; tokenization and batching live elsewhere.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Backend(Protocol):
    name: str  # "numpy" | "onnxruntime"
    dim: int  # embedding width, e.g. 384
    max_length: int  # longest sequence the model accepts, e.g. 256

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """(B, T) integer ids and 0/1 mask → (B, dim) float32, mean-pooled and L2-normalized."""
        ...

    def health(self) -> dict:
        """Run a tiny real inference and report on it; raise if the output is not sane."""
        ...

    def replicate(self) -> Backend:
        """Another engine instance of the same model, precision and threads, for another thread
        (the server runs one per worker). Shares what it safely can with this one."""
        ...
