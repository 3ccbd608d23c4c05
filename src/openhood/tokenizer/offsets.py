"""Character offsets of each token of a text (TEI's ``/tokenize``: ``start``/``stop`` per token).

The fast tokenizer works on normalized code points and keeps no map back to the original text,
so offsets are recovered afterwards: the text is split into words the way BERT's pre-tokenizer
does (whitespace and control characters separate, each punctuation or CJK character is a word of
its own), each word is encoded alone, and its pieces share the word's span in proportion to
their lengths (``##`` dropped). A word that became several pieces therefore gets exact outer
bounds and approximate inner ones whenever normalization changed the word's length. The result
is checked: when the per-word ids do not equal the text's own ids (added tokens, odd Unicode),
the offsets are ``None`` rather than wrong. The trade-off: a second, per-word encoding of the text
— paid only by callers who ask for offsets.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from openhood.tokenizer import unicode_tables as ut
from openhood.tokenizer.normalizer import CJK_RANGES
from openhood.tokenizer.tokenizer import WordPieceTokenizer

Span = tuple[int, int] | None


@cache
def _char_sets() -> tuple[frozenset[int], frozenset[int]]:
    def expand(ranges) -> frozenset[int]:
        return frozenset(cp for a, b in ranges for cp in range(a, b + 1))

    separators = expand(ut.WHITESPACE) | expand(ut.CONTROL) | expand(ut.CLEAN_SPACE) | {0, 0xFFFD}
    return separators, expand(ut.PUNCTUATION) | expand(CJK_RANGES)


def word_spans(text: str) -> list[tuple[int, int]]:
    """BERT pre-tokenization on the original text, as [start, stop) character spans.

    >>> word_spans("Hi, you!")
    [(0, 2), (2, 3), (4, 7), (7, 8)]
    """
    separators, singles = _char_sets()
    spans: list[tuple[int, int]] = []
    start = None
    for i, c in enumerate(text):
        cp = ord(c)
        if cp in separators or cp in singles:
            if start is not None:
                spans.append((start, i))
                start = None
            if cp in singles:
                spans.append((i, i + 1))
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


def token_offsets(tokenizer: WordPieceTokenizer, text: str, ids: np.ndarray) -> list[Span]:
    """One span per id of ``ids`` (``tokenizer.encode(text)``, specials included; a special
    token's span is None), or all None when the words do not re-encode to the same ids."""
    n_prefix, n_suffix = len(tokenizer.spec.prefix_ids), len(tokenizer.spec.suffix_ids)
    body = np.asarray(ids)[n_prefix : len(ids) - n_suffix]
    spans = word_spans(text)
    words: list[np.ndarray] = list(tokenizer.encode_batch([text[a:b] for a, b in spans])) if spans else []
    out: list[Span] = []
    prefix = tokenizer.spec.continuing_subword_prefix
    for (a, b), word_ids in zip(spans, words, strict=True):
        pieces = np.asarray(word_ids)[n_prefix : len(word_ids) - n_suffix]
        sizes = [
            max(1, len(t[len(prefix) :] if t.startswith(prefix) else t))
            for t in tokenizer.convert_ids_to_tokens(pieces)
        ]
        scale = (b - a) / sum(sizes) if sizes else 0.0
        pos = 0
        for k, size in enumerate(sizes):
            start = a + round(pos * scale)
            pos += size
            out.append((start, b if k == len(sizes) - 1 else a + round(pos * scale)))
    ok = len(out) >= len(body) and np.array_equal(
        np.concatenate([np.asarray(w)[n_prefix : len(w) - n_suffix] for w in words])[: len(body)] if spans else body,
        body,
    )
    middle: list[Span] = out[: len(body)] if ok else [None] * len(body)
    return [None] * n_prefix + middle + [None] * (len(ids) - n_prefix - len(body))
