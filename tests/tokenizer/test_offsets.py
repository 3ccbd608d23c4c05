"""Character offsets of tokens (tokenizer/offsets.py) on the real default tokenizer."""

from __future__ import annotations

import itertools

import pytest

from openhood.models.registry import resolve_model_dir
from openhood.tokenizer import WordPieceTokenizer
from openhood.tokenizer.offsets import token_offsets


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer.from_pretrained(resolve_model_dir())


@pytest.mark.parametrize(
    "text,pieces",
    [
        ("Hello, unbelievable world!", ["Hello", ",", "unbelievable", "world", "!"]),
        ("  naïve\tcafé — ünïcödé ", ["naïve", "café", "—", "ünïcödé"]),
        ("東京は", ["東", "京", "は"]),
        ("emoji🙂!!", ["emoji🙂", "!", "!"]),  # a word with an unknown character is one [UNK]
    ],
)
def test_spans_cut_the_original_text_into_tokens(tok, text, pieces):
    ids = tok.encode(text)
    spans = token_offsets(tok, text, ids)
    assert spans[0] is None and spans[-1] is None  # [CLS], [SEP]
    assert [text[a:b] for a, b in spans[1:-1]] == pieces


def test_word_pieces_split_a_word_in_proportion(tok):
    text = "Привет"
    ids = tok.encode(text)
    inner = token_offsets(tok, text, ids)[1:-1]
    assert len(inner) > 1 and inner[0][0] == 0 and inner[-1][1] == len(text)
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(inner))


def test_truncated_ids_get_the_spans_of_the_kept_tokens(tok):
    text = "one two three four five six"
    ids = tok.encode(text, max_length=5)  # [CLS] one two three [SEP]
    spans = token_offsets(tok, text, ids)
    assert [text[a:b] for a, b in spans[1:-1]] == ["one", "two", "three"]


def test_ids_that_do_not_match_give_no_offsets(tok):
    text = "hello world"
    other = tok.encode("goodbye world")
    assert token_offsets(tok, text, other) == [None] * len(other)
