"""``Embedder``: texts in, sentence embeddings out — a served ``embed`` model used offline.

Offline batch inference the way the mission asks for it: tokenize everything once (ragged,
no padding), sort by length, cut into batches of ``batch_size``, pad each batch only to its
own longest text, run the model (backend + pooling, exactly the server's path), and put the
rows back in input order. Sorting makes padding waste nearly zero; the trade-off is that
results come back only when the whole call is done (the server's scheduler, not this class,
handles streaming requests).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openhood.models import EngineOptions, ModelSpec, ServedModel, load_model
from openhood.models.text import TextPreprocessor


class Embedder:
    def __init__(self, model: ServedModel):
        if model.task != "embed":
            raise ValueError(f"model {model.name!r} does the {model.task!r} task, not embed")
        self.model = model
        self.model_name = model.name
        self.max_length = model.max_length
        self.dim = model.output.shape[0]

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, backend: str = "numpy", precision: str = "fp32",
                        threads: int | None = None, fusion: bool = True) -> Embedder:
        """``path=None`` → the bundled all-MiniLM-L6-v2; ``backend`` "numpy" | "onnxruntime"."""
        options = EngineOptions(backend=backend, precision=precision, threads=threads, fusion=fusion)
        return cls(load_model(ModelSpec(path=None if path is None else str(path)), options))

    @property
    def tokenizer(self):
        return self.model.preprocessor.tokenizer

    @property
    def backend(self):
        return self.model.backends[0]

    def embed(self, texts: str | list[str], batch_size: int = 32) -> np.ndarray:
        """One text or a list → (n, dim) float32, rows in input order."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        pre = self.model.preprocessor
        if not isinstance(pre, TextPreprocessor):
            raise TypeError(f"Embedder embeds texts; this model's input is {type(pre).__name__}")
        rb = pre.encode(texts)
        order = np.argsort(rb.lengths, kind="stable")  # shortest first: minimal padding per batch
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            rows = [rb[int(i)] for i in idx]
            out[idx] = self.model.run(0, rows, max(len(r) for r in rows))
        return out

    def close(self) -> None:
        self.model.close()

    def __repr__(self) -> str:
        return f"Embedder({self.model_name}, backend={self.backend.name}, dim={self.dim}, max_length={self.max_length})"
