"""RaggedBatch / PaddedBatch behaviour and the Tokenizer's public attributes."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.tokenizer import RaggedBatch


def test_ragged_layout(tok):
    texts = ["a b c", "", "hello world, again"]
    rb = tok.encode_batch(texts)
    assert rb.ids.dtype == np.int32 and rb.offsets.dtype == np.int64 and rb.lengths.dtype == np.int64
    assert rb.offsets.tolist() == [0, *np.cumsum(rb.lengths).tolist()]
    assert len(rb) == 3 and rb[1].tolist() == [tok.cls_id, tok.sep_id]
    assert [r.tolist() for r in rb] == [tok.encode(t).tolist() for t in texts]
    assert rb[-1].tolist() == rb[2].tolist()
    with pytest.raises(IndexError):
        rb[3]
    assert not rb.truncated.any()


def test_pad_to_longest_and_to_fixed_length():
    rb = RaggedBatch(np.array([101, 7, 8, 102, 101, 102], np.int32), np.array([4, 2]), np.zeros(2, bool))
    p = rb.pad()
    assert p.input_ids.tolist() == [[101, 7, 8, 102], [101, 102, 0, 0]]
    assert p.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert p.token_type_ids.tolist() == [[0] * 4, [0] * 4]
    assert rb.pad(6).input_ids.shape == (2, 6)
    with pytest.raises(ValueError, match="longest text has 4"):
        rb.pad(3)


def test_truncated_flags(tok):
    rb = tok.encode_batch(["one two three four five", "one"], max_length=4)
    assert rb.truncated.tolist() == [True, False]
    assert rb.lengths.tolist() == [4, 3]


def test_public_ids(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.vocab_size) == (0, 100, 101, 102, 30522)
    assert tok.convert_ids_to_tokens([101, 7592, 102]) == ["[CLS]", "hello", "[SEP]"]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.convert_ids_to_tokens([10**6])


def test_bad_inputs(tok):
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
    with pytest.raises(TypeError):
        tok.encode_batch(["ok", None])


def test_lone_surrogate_is_a_value_error(tok):
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode("ab\ud800c")
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode_batch(["fine", "ab\udfffc"])


def test_take_gathers_rows_in_the_given_order():
    rb = RaggedBatch(
        np.array([101, 7, 8, 102, 101, 102, 101, 9, 102], np.int32),
        np.array([4, 2, 3]),
        np.array([True, False, False]),
        pad_id=5,
    )
    sub = rb.take([2, 0])
    assert [r.tolist() for r in sub] == [[101, 9, 102], [101, 7, 8, 102]]
    assert sub.truncated.tolist() == [False, True] and sub.pad_id == 5
    assert sub.pad().input_ids.tolist() == [[101, 9, 102, 5], [101, 7, 8, 102]]
    assert len(rb.take([])) == 0
