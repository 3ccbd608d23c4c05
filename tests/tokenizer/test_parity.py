"""Exact id equality with HF ``tokenizers`` (and with our naive reference) on hand-written and random text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from id_helpers import hf_ids, our_ids
from nasty_cases import NASTY

from openhood.tokenizer import reference


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_nasty_case_matches_hf(tok, hf, text):
    assert tok.encode(text).tolist() == hf.encode(text).ids


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_nasty_case_matches_naive_reference(tok, text):
    assert tok.encode(text).tolist() == reference.encode(tok.spec, text)


def test_batch_equals_one_by_one_and_hf(tok, hf):
    texts = NASTY * 3 + ["\x00inside", "tail\x00"]  # U+0000 forces the per-text path
    batch = our_ids(tok, texts)
    assert batch == [tok.encode(t).tolist() for t in texts]
    assert batch == hf_ids(hf, texts)


def test_empty_batch(tok):
    rb = tok.encode_batch([])
    assert len(rb) == 0 and rb.ids.size == 0 and rb.offsets.tolist() == [0]
    assert rb.pad().input_ids.shape == (0, 0)


def test_encode_returns_int32(tok):
    ids = tok.encode("hello world")
    assert ids.dtype == np.int32 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id


# Random text biased toward the hard parts of Unicode: marks, punctuation, spaces, controls, CJK.
_alphabet = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list("aeiouAEIOU ,.!?'\"#\t\n\u0301\u0308\u200b\u200d\ufffd\x00ΣİıßÅ中日한ไ😀[]")),
)
_texts = st.text(alphabet=_alphabet, max_size=60)


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(_texts, min_size=1, max_size=8))
def test_random_unicode_matches_hf(tok, hf, texts):
    ours = our_ids(tok, texts)
    assert ours == hf_ids(hf, texts)
    assert ours[0] == reference.encode(tok.spec, texts[0])


@settings(max_examples=40, deadline=None, database=None)
@given(st.lists(st.sampled_from(["[SEP]", "[CLS]", "[MASK]", "a", "b c", "Ä", "[", "SEP]", " "]), max_size=12))
def test_added_tokens_in_text_match_hf(tok, hf, pieces):
    text = "".join(pieces)
    assert tok.encode(text).tolist() == hf.encode(text).ids


def test_every_code_point_matches_hf(tok, hf):
    """All 1.1M code points, 512 per text, each glued to letters so it meets words and marks."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    texts = [" ".join(f"a{chr(cp)}b" for cp in cps[i : i + 512]) for i in range(0, len(cps), 512)]
    ours, ref = our_ids(tok, texts), hf_ids(hf, texts)
    bad = [i for i in range(len(texts)) if ours[i] != ref[i]]
    assert not bad, f"{len(bad)} of {len(texts)} chunks differ, first starts at U+{cps[bad[0] * 512]:04X}"
