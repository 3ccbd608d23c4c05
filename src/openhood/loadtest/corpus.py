"""Load-test inputs: texts drawn, seeded, from a JSONL corpus with its real length distribution.

A load test on fixed-length or synthetic text measures a server nobody runs: real traffic mixes
one-word queries with paragraphs, and the long tail of lengths is exactly what drags P99. So we
sample texts *uniformly from the corpus lines* (with replacement), which keeps the corpus's
length distribution as it is. The trade-off: the whole corpus is held in memory (a list of
str; ~40k short lines is a few MB) so each draw is O(1) and no file I/O happens during the run.

Example::

    >>> c = TextCorpus(["a", "bb", "ccc"])
    >>> s = c.sampler(seed=1); len(s.draw(2))
    2
"""

from __future__ import annotations

import random
from pathlib import Path

from openhood.corpus import CorpusError, read_texts

__all__ = ["CorpusError", "TextCorpus", "synthetic_corpus"]


class TextCorpus:
    """The texts of a corpus; ``max_chars`` cuts each one (like a client-side truncation)."""

    def __init__(self, texts: list[str], max_chars: int | None = None):
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        texts = [t[:max_chars] if max_chars else t for t in texts if t]
        if not texts:
            raise CorpusError("the corpus holds no non-empty text")
        self.texts = texts

    @classmethod
    def from_jsonl(
        cls, path: str | Path, field: str = "text", max_chars: int | None = None, limit: int | None = None
    ) -> TextCorpus:
        """Read ``{"text": ...}`` lines; ``limit`` keeps the first N lines (tests, quick runs)."""
        texts = read_texts(path, field=field, limit=limit)
        return cls(texts, max_chars=max_chars)

    def __len__(self) -> int:
        return len(self.texts)

    def sampler(self, seed: int) -> TextSampler:
        return TextSampler(self.texts, seed)


class TextSampler:
    """A seeded stream of draws: the same seed gives the same sequence of request bodies."""

    def __init__(self, texts: list[str], seed: int):
        self._texts = texts
        self._rng = random.Random(seed)

    def draw(self, n: int) -> list[str]:
        return [self._texts[self._rng.randrange(len(self._texts))] for _ in range(n)]


def synthetic_corpus(n: int = 500, seed: int = 0) -> TextCorpus:
    """A corpus of generated English-like text with a long-tailed length mix, for quick runs.

    Lengths follow a log-normal shape (median ~12 words, a tail into hundreds), like short
    queries mixed with paragraphs. Used when no ``--corpus`` is given and by the tests.
    """
    rng = random.Random(seed)
    words = (
        "the server batches short requests together while long inputs wait in their own "
        "bucket so latency stays predictable under load and every stage reports its cost"
    ).split()
    texts = []
    for _ in range(n):
        k = max(1, min(400, int(rng.lognormvariate(2.5, 0.9))))
        texts.append(" ".join(rng.choice(words) for _ in range(k)))
    return TextCorpus(texts)
