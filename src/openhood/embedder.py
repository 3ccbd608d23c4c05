"""``Embedder``: texts in, sentence embeddings out: openhood's tokenizer + a backend.

Offline batch inference the way the mission asks for it: tokenize everything once (ragged,
no padding), sort by length, cut into batches of ``batch_size``, pad each batch only to its
own longest text, run the backend, and put the rows back in input order. Sorting makes padding
waste nearly zero; the trade-off is that results come back only when the whole call is done
(the server's scheduler, not this class, handles streaming requests).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openhood.backends import load_backend
from openhood.models import resolve_model_dir


class Embedder:
    def __init__(self, tokenizer, backend, model_name: str):
        self.tokenizer = tokenizer
        self.backend = backend
        self.model_name = model_name
        self.max_length = backend.max_length
        self.dim = backend.dim

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, backend: str = "numpy", precision: str = "fp32", **backend_options) -> Embedder:
        """``path=None`` → the bundled all-MiniLM-L6-v2; ``backend`` "numpy" | "onnxruntime"."""
        from openhood.engine.bert import read_config
        from openhood.tokenizer import Tokenizer

        folder = resolve_model_dir(path)
        be = load_backend(backend, folder, precision=precision, **backend_options)
        return cls(Tokenizer.from_pretrained(folder), be, read_config(folder).model_name)

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
        rb = self.tokenizer.encode_batch(texts, max_length=self.max_length)
        order = np.argsort(rb.lengths, kind="stable")  # shortest first: minimal padding per batch
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            padded = rb.take(idx).pad()
            out[idx] = self.backend.embed(padded.input_ids, padded.attention_mask)
        return out

    def __repr__(self) -> str:
        return f"Embedder({self.model_name}, backend={self.backend.name}, dim={self.dim}, max_length={self.max_length})"

