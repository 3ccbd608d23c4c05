"""Both tokenizers implement the one ``Tokenizer`` protocol with the same argument names and
defaults (HF's), so a caller can hold either: a newcomer's call never depends on which it got."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from openhood.generate.bundled import default_gguf_path
from openhood.models import default_model_dir
from openhood.tokenizer import Tokenizer, WordPieceTokenizer
from openhood.tokenizer.bpe import BPETokenizer

METHODS = ["from_pretrained", "encode", "encode_batch", "decode", "convert_ids_to_tokens"]


@pytest.mark.parametrize("name", METHODS)
def test_same_argument_names_and_defaults(name):
    want = [(p.name, p.default) for p in inspect.signature(getattr(Tokenizer, name)).parameters.values()]
    want = [(n, d) for n, d in want if n not in ("self", "cls")]
    for cls in (WordPieceTokenizer, BPETokenizer):
        got = inspect.signature(getattr(cls, name)).parameters
        first = [(p.name, p.default) for p in got.values() if p.name not in ("self", "cls")][: len(want)]
        assert first == want, (cls.__name__, name, first)


@pytest.fixture(scope="module", params=["wordpiece", "bpe"])
def tok(request) -> Tokenizer:
    if request.param == "wordpiece":
        return WordPieceTokenizer.from_pretrained(default_model_dir())
    return BPETokenizer.from_pretrained(default_gguf_path())


def test_one_call_sequence_works_on_either(tok):
    ids = tok.encode("Hello world, hello tokenizers!", max_length=6)
    assert ids.dtype == np.int32 and len(ids) <= 6
    batch = tok.encode_batch(["one", "two words here"], max_length=4)
    assert batch.lengths.tolist() == [
        len(tok.encode("one", max_length=4)),
        len(tok.encode("two words here", max_length=4)),
    ]
    text = "a plain sentence"
    full = tok.encode(text)
    assert "plain" in tok.decode(full)
    special = sorted(tok.special_ids)
    assert special and all(0 <= i < tok.vocab_size for i in special)
    with_special = [special[0], *full.tolist()]
    assert tok.decode(with_special) == tok.decode(full)  # skipped by default, as HF does
    assert len(tok.decode(with_special, skip_special_tokens=False)) > len(tok.decode(full))
    assert len(tok.convert_ids_to_tokens(full)) == len(full)
