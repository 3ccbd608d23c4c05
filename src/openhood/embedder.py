"""``Embedder``: texts in, sentence embeddings out — a served ``embed`` model used offline.

Offline batch inference the way the mission asks for it: tokenize everything once (ragged,
no padding), sort by length, cut into batches of ``batch_size``, pad each batch only to its
own longest text, run the model (backend + pooling, exactly the server's path), and put the
rows back in input order. Sorting makes padding waste nearly zero; the trade-off is that
results come back only when the whole call is done (the server's scheduler, not this class,
handles streaming requests).

``workers`` > 1 runs the sorted batches on that many engines at once (each its own backend
instance, weights shared, ``threads`` intra-op threads each), every worker taking the next
batch when it is free. On a CPU whose cores are shared, N one-thread engines beat one N-thread
engine: a one-thread engine never waits at a barrier for a descheduled sibling thread
(measured in docs/benchmarks.md, "Batch"). Results do not depend on ``workers``.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
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
        # worker 0 is the calling thread; the others run on this pool (made on first use)
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, backend: str = "numpy", precision: str = "fp32",
                        threads: int | None = None, fusion: bool = True, workers: int = 1) -> Embedder:
        """``path=None`` → the bundled all-MiniLM-L6-v2; ``backend`` "numpy" | "onnxruntime";
        ``workers`` engines run batches side by side, ``threads`` intra-op threads each."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        options = EngineOptions(backend=backend, precision=precision, threads=threads, fusion=fusion, workers=workers)
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
        starts = itertools.count(0, batch_size)  # next() is atomic under the GIL: workers share it

        def work(worker: int) -> None:
            while (start := next(starts)) < len(texts):
                idx = order[start : start + batch_size]
                rows = [rb[int(i)] for i in idx]
                out[idx] = self.model.run(worker, rows, max(len(r) for r in rows))  # disjoint rows per batch

        workers = min(self.model.workers, -(-len(texts) // batch_size))
        if workers > 1 and self._pool is None:
            self._pool = ThreadPoolExecutor(self.model.workers - 1, thread_name_prefix="openhood-embed")
        futures = [self._pool.submit(work, w) for w in range(1, workers)] if self._pool is not None else []
        try:
            work(0)
        finally:  # never return (or raise) while another worker still writes into ``out``
            for f in futures:
                f.result()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self.model.close()

    def __repr__(self) -> str:
        return f"Embedder({self.model_name}, backend={self.backend.name}, dim={self.dim}, max_length={self.max_length})"
