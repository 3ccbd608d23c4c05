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

``encode`` is the same computation behind sentence-transformers' signature and meanings (one
string → a 1-D vector, ``normalize_embeddings``, a progress bar over batches, a list of rows
when ``convert_to_numpy=False``), so code written for ``SentenceTransformer`` runs unchanged.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

import numpy as np

from openhood.models import EngineOptions, ModelSpec, ModelSpecError, ServedModel, load_model
from openhood.models.tasks import Task
from openhood.models.text import TextPreprocessor
from openhood.progress import StatusLine, bar


class Embedder:
    def __init__(self, model: ServedModel):
        if model.task != Task.EMBED:
            raise ModelSpecError(f"model {model.name!r} does the '{model.task.value}' task, not embed")
        self.model = model
        self.model_name = model.name
        self.max_length = model.max_length
        self.dim = model.output.shape[0]
        # worker 0 is the calling thread; the others run on this pool (made on first use)
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path | None = None,
        backend: str = "numpy",
        precision: str = "fp32",
        threads: int | None = None,
        fusion: bool = True,
        workers: int = 1,
    ) -> Embedder:
        """``path=None`` → the bundled all-MiniLM-L6-v2; ``backend`` "numpy" | "onnxruntime";
        ``workers`` engines run batches side by side, ``threads`` intra-op threads each."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        options = EngineOptions(backend=backend, precision=precision, threads=threads, fusion=fusion, workers=workers)
        model = load_model(ModelSpec(path=None if path is None else str(path)), options)
        if not isinstance(model, ServedModel):
            raise ModelSpecError(
                f"{model.name} does the '{model.task.value}' task: an Embedder needs a text embedding model"
            )
        return cls(model)

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
        return self._run(list(texts), batch_size)

    def encode(
        self,
        sentences: str | list[str],
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        normalize_embeddings: bool = False,
        device: str | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """sentence-transformers' ``encode``: a string → (dim,), a list → (n, dim) float32
        (``convert_to_numpy=False``: a list of n (dim,) arrays); ``normalize_embeddings`` makes
        each row unit length; ``show_progress_bar`` draws a bar over the batches on stderr
        (``None``: only when stderr is a terminal and there is more than one batch). There is no
        torch here: ``convert_to_tensor=True`` and a device other than the CPU are refused."""
        if convert_to_tensor:
            raise ValueError(
                "convert_to_tensor=True needs torch, which openhood does not use; use convert_to_numpy=True"
            )
        if device not in (None, "cpu"):
            raise ValueError(f"openhood runs on the CPU; device={device!r} is not available")
        single = isinstance(sentences, str)
        texts = [sentences] if isinstance(sentences, str) else list(sentences)
        bar = ProgressBar(sys.stderr, show_progress_bar)
        out = self._run(texts, batch_size, on_batch=bar.update)
        bar.close()
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        if single:
            return out[0]
        return out if convert_to_numpy else list(out)

    def _run(self, texts: list[str], batch_size: int, on_batch: Callable[[int, int], None] | None = None) -> np.ndarray:
        """(n, dim) float32 in input order; ``on_batch(done, total)`` after each engine call."""
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
        batches = -(-len(texts) // batch_size)
        starts = itertools.count(0, batch_size)  # next() is atomic under the GIL: workers share it
        done = itertools.count(1)
        progress = threading.Lock()  # one bar, redrawn by whichever worker finishes a batch

        def work(worker: int) -> None:
            while (start := next(starts)) < len(texts):
                idx = order[start : start + batch_size]
                rows = [rb[int(i)] for i in idx]
                out[idx] = self.model.run(worker, rows, max(len(r) for r in rows))  # disjoint rows per batch
                if on_batch is not None:
                    with progress:
                        on_batch(next(done), batches)

        workers = min(self.model.workers, batches)
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


class ProgressBar:
    """``Batches: 3/10 [=========                     ]`` redrawn in place on one line of ``stream``.
    ``show=None`` (sentence-transformers' default) draws only for a long input — more than one
    batch — and only on a terminal, so logs and pipes stay clean."""

    WIDTH = 30

    def __init__(self, stream: TextIO, show: bool | None):
        self.line, self.show = StatusLine(stream, tty_interval=0.0, log_interval=0.0), show

    def update(self, done: int, total: int) -> None:
        if self.show is None:
            self.show = total > 1 and self.line.tty
        if self.show:
            self.line.update(f"Batches: {done}/{total} {bar(done / total, self.WIDTH, '=')}", force=True)

    def close(self) -> None:
        self.line.close()
