"""The numba byte-level BPE encoder against its plain references: the hand-compiled pre-tokenizer
against the ``re`` pattern, batched ids against ``encode_reference`` (regex split + Python merges,
no cache), and the bounded piece cache."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from bpe_cases import BPE_NASTY
from hypothesis import given, settings
from hypothesis import strategies as st

from openhood.generate.bundled import default_gguf_path
from openhood.tokenizer.bpe import BPETokenizer
from openhood.tokenizer.bpe_kernel import split_pieces
from openhood.tokenizer.bpe_tables import PieceCache
from openhood.tokenizer.byte_level import code_point_classes, pattern_classes, pretokenizer_pattern


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.from_pretrained(default_gguf_path())


def kernel_pieces(text: str, split_digits: bool) -> list[str]:
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    ends = split_pieces(cps, cps.size, code_point_classes(split_digits), split_digits).tolist()
    return [text[a:b] for a, b in zip([0, *ends], ends, strict=False)]


@pytest.mark.parametrize("split_digits", [True, False])
def test_class_table_equals_the_pattern_classes(split_digits):
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    table = code_point_classes(split_digits)
    for body, cls in zip(pattern_classes(split_digits), (1, 2, 3), strict=True):
        got = np.asarray([ord(c) for c in re.findall(f"[{body}]", everything)])
        assert np.array_equal(got, np.flatnonzero(table == cls)), cls


@pytest.mark.parametrize("split_digits", [True, False])
@pytest.mark.parametrize("text", BPE_NASTY, ids=range(len(BPE_NASTY)))
def test_kernel_split_equals_regex(text, split_digits):
    assert kernel_pieces(text, split_digits) == pretokenizer_pattern(split_digits).findall(text)


# Every class the pre-tokenizer tells apart, and the characters its alternatives name.
# U+1C89 and U+2B740 are letters and U+11DE0 / U+1CCF0 numbers to HF but unassigned in Python 3.11.
_alphabet = st.sampled_from(
    list(" \t\n\r\u3000\u00a0\x1c'sdlmtvreSD aé中1٣½,.!?-\u0301😀\x00\u1c89\U0002b740\U00011de0\U0001ccf0")
)


@settings(max_examples=400, deadline=None, database=None)
@given(st.text(alphabet=_alphabet, max_size=30), st.booleans())
def test_kernel_split_equals_regex_on_random_text(text, split_digits):
    assert kernel_pieces(text, split_digits) == pretokenizer_pattern(split_digits).findall(text)


def test_batch_equals_reference_one_by_one(bpe):
    texts = [
        *BPE_NASTY,
        "",
        "a" * 5000,  # pieces far longer than the kernel's scratch buffers
        " " * 3000 + "x",
        "€" * 2000,
        "<|im_start|>",
        "<|im_start|><|im_end|>",
        "x<|im_end|>",
        "<|im_end|>y",
        "<|im_",  # a special token's prefix at the end of one text ...
        "start|>",  # ... and its rest at the start of the next: never matched across texts
    ]
    for parse_special in (True, False):
        rows = [r.tolist() for r in bpe.encode_batch(texts, parse_special=parse_special)]
        assert rows == [bpe.encode_reference(t, parse_special) for t in texts]
        assert bpe.encode_many(texts, parse_special) == rows


def test_truncation(bpe):
    texts = ["one two three four five", "one", "", "<|im_start|>a b c"]
    full = [r.tolist() for r in bpe.encode_batch(texts)]
    rb = bpe.encode_batch(texts, max_length=3)
    assert [r.tolist() for r in rb] == [r[:3] for r in full]
    assert rb.truncated.tolist() == [len(r) > 3 for r in full]
    assert rb.ids.dtype == np.int32


def test_cache_is_bounded_and_restarts_when_full(bpe):
    saved = bpe._cache
    try:
        bpe._cache = PieceCache(5, bytes_per_entry=4, ids_per_entry=2)
        texts = [f"word{i} other{i} <|im_end|> averyveryverylongword" for i in range(20)]
        first = [r.tolist() for r in bpe.encode_batch(texts)]
        assert first == [bpe.encode_reference(t) for t in texts]
        assert 0 < len(bpe._cache) <= 5
        assert [r.tolist() for r in bpe.encode_batch(texts)] == first
    finally:
        bpe._cache = saved


def test_a_new_tokenizer_starts_with_an_empty_cache(bpe):
    assert len(BPETokenizer(bpe.spec)._cache) == 0


def test_gpt2_rule_without_digit_split_matches_reference_and_hf(bpe):
    from dataclasses import replace

    from id_helpers import hf_ids

    from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer

    gpt2 = BPETokenizer(replace(bpe.spec, split_digits=False))
    texts = [*BPE_NASTY, "a 12 345  67\t8", "x1y22 z"]
    rows = [r.tolist() for r in gpt2.encode_batch(texts)]
    assert rows == [gpt2.encode_reference(t) for t in texts]
    assert rows == hf_ids(hf_bpe_tokenizer(gpt2.spec), texts)
