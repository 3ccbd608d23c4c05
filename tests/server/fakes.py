"""A tiny deterministic tokenizer + backend with the real contracts, for scheduler/app unit tests.

The fake backend returns per-token vectors (a fixed random table) as ``token_embeddings``; the
served fake model pools them with the real ``MeanPooling`` postprocessor and pads with the real
``TextPreprocessor``, so padding and batch composition must not change its output — the same
property the real engine has — and a scheduler bug that mixes rows up shows as a wrong vector.
``FakeBackend.embed`` is that whole path for one padded batch (the scheduler tests' engine).
"""

from __future__ import annotations

import threading
import zlib

import numpy as np

PAD, UNK, CLS, SEP = 0, 100, 101, 102


class FakeRagged:
    def __init__(self, seqs: list[np.ndarray], truncated: list[bool]):
        self._seqs = seqs
        self.lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        self.truncated = np.array(truncated, dtype=bool)

    def __len__(self):
        return len(self._seqs)

    def __iter__(self):
        return iter(self._seqs)

    def __getitem__(self, i):
        return self._seqs[i]


class FakeTokenizer:
    """Whitespace words → stable ids in [1000, 30000); [CLS] ... [SEP]; HF-style truncation."""

    pad_id, unk_id, cls_id, sep_id, vocab_size = PAD, UNK, CLS, SEP, 30522

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        if "\x00" in text:  # stands in for text the real tokenizer refuses (lone surrogates)
            raise ValueError("text contains a NUL character")
        ids = [1000 + zlib.crc32(w.encode()) % 29000 for w in text.split()]
        if max_length is not None and len(ids) + 2 > max_length:
            ids = ids[: max_length - 2]
        return np.array([CLS, *ids, SEP], dtype=np.int32)

    def encode_batch(self, texts: list[str], max_length: int | None = None) -> FakeRagged:
        seqs, truncated = [], []
        for t in texts:
            full = len(t.split()) + 2
            seqs.append(self.encode(t, max_length))
            truncated.append(max_length is not None and full > max_length)
        return FakeRagged(seqs, truncated)


class FakeBackend:
    name = "fake"
    precision = "fp32"
    input_names = ("input_ids", "attention_mask")
    output_names = ("token_embeddings",)
    threads = 1

    def __init__(self, dim: int = 16, max_length: int = 64, fail_len: int | None = None):
        self.dim, self.max_length = dim, max_length
        self.table = np.random.default_rng(0).standard_normal((30522, dim)).astype(np.float32)
        self.fail_len = fail_len  # a batch holding a sequence of this many tokens raises
        self.calls: list[tuple[int, int]] = []  # (B, T) of each embed call
        self.thread_names: set[str] = set()  # threads that ran it
        self.gate = threading.Event()  # cleared → embed blocks (lets tests hold a batch in flight)
        self.gate.set()

    def run(self, feeds) -> dict[str, np.ndarray]:
        input_ids, attention_mask = feeds["input_ids"], feeds["attention_mask"]
        self.gate.wait()
        self.thread_names.add(threading.current_thread().name)
        self.calls.append(input_ids.shape)
        if self.fail_len is not None and (attention_mask.sum(1) == self.fail_len).any():
            raise RuntimeError("fake engine failure")
        return {"token_embeddings": self.table[input_ids]}  # (B, T, dim)

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """(B, T) ids and mask → (B, dim) unit vectors: run + the real pooling."""
        from openhood.models.pooling import MeanPooling

        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        return MeanPooling(normalize=True)(self.run(feeds), feeds)

    def replicate(self, threads: int | None = None) -> FakeBackend:
        return self

    def close(self) -> None:
        pass


def runner(backend: FakeBackend):
    """The scheduler's per-worker function over a fake engine: the real padding, then ``embed``."""
    from openhood.models.text import TextPreprocessor

    pre = TextPreprocessor(FakeTokenizer(), backend.max_length)

    def run(payloads, padded_len):
        feeds = pre.collate(payloads, padded_len)
        return backend.embed(feeds["input_ids"], feeds["attention_mask"])

    return run


def fake_model(**backend_kwargs):
    """A served embed model over the fake tokenizer and backend (real pre/postprocessors)."""
    from pathlib import Path

    from openhood.models import OutputSpec, ServedModel
    from openhood.models.pooling import MeanPooling
    from openhood.models.text import TextPreprocessor

    backend = FakeBackend(**backend_kwargs)
    return ServedModel(
        "fake/fake-model",
        "embed",
        Path("."),
        TextPreprocessor(FakeTokenizer(), backend.max_length),
        [backend],
        MeanPooling(normalize=True),
        OutputSpec((backend.dim,), unit_norm=True),
        info={"backend": "fake", "dim": backend.dim},
    )
