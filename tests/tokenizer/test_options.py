"""Every option the files can declare, against HF on the same file; refusals for what we cannot honour."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from id_helpers import hf_ids, hf_tokenizers, our_ids
from nasty_cases import NASTY

from openhood.tokenizer import UnsupportedTokenizerError, WordPieceTokenizer
from openhood.tokenizer.config import TokenizerConfigError

EXTRA = ["Ünïcödé ÀÉÎÕÜ straße", "ᾼ ǰ ΐ", "ab\u0300\u0316cd", "x" * 12]


def _variant(model_dir, tmp_path, edit):
    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _norm(**options):
    def edit(data):
        data["normalizer"].update(options)

    return edit


VARIANTS = {
    "cased": _norm(lowercase=False, strip_accents=None),
    "cased+strip": _norm(lowercase=False, strip_accents=True),
    "lower-no-strip": _norm(lowercase=True, strip_accents=False),
    "no-clean": _norm(clean_text=False),
    "no-chinese": _norm(handle_chinese_chars=False),
    "short-words": lambda d: d["model"].update(max_input_chars_per_word=5),
    "bert-processing": lambda d: d.update(
        post_processor={"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_matches_hf(model_dir, tmp_path, name):
    path = _variant(model_dir, tmp_path, VARIANTS[name])
    ours = WordPieceTokenizer.from_pretrained(path)
    ref = hf_tokenizers.Tokenizer.from_file(str(path))
    ref.no_truncation()
    ref.no_padding()
    texts = NASTY + EXTRA
    assert our_ids(ours, texts) == hf_ids(ref, texts)


def test_vocab_txt_fallback_matches_tokenizer_json(model_dir, tmp_path, tok):
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(model_dir / name, tmp_path / name)
    fallback = WordPieceTokenizer.from_pretrained(tmp_path)
    assert fallback.spec.source.endswith("vocab.txt")
    assert our_ids(fallback, NASTY) == our_ids(tok, NASTY)
    assert fallback.declared_max_length == 512  # model_max_length from tokenizer_config.json


@pytest.mark.parametrize("max_length", [2, 3, 5, 16, 128])
def test_truncation_matches_hf(tok, model_dir, max_length):
    ref = hf_tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ref.no_padding()
    ref.enable_truncation(max_length=max_length)
    texts = [*NASTY, "word " * 200, "[SEP] " * 50, "a" * 300 + " b"]
    rb = tok.encode_batch(texts, max_length=max_length)
    ref_enc = ref.encode_batch(texts)
    assert [r.tolist() for r in rb] == [e.ids for e in ref_enc]
    assert rb.truncated.tolist() == [bool(e.overflowing) for e in ref_enc]
    assert [tok.encode(t, max_length=max_length).tolist() for t in texts] == [e.ids for e in ref_enc]


def test_truncation_rejects_too_small_max_length(tok):
    with pytest.raises(ValueError, match="special tokens"):
        tok.encode("hello", max_length=1)
    with pytest.raises(TypeError):
        tok.encode_batch(["hello"], max_length="8")


def test_declared_defaults_match_hf_as_loaded(tok, model_dir):
    """HF applies the file's truncation (128) and Fixed padding (128); we expose them as defaults to pass."""
    ref = hf_tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert (tok.declared_max_length, tok.declared_padding_length) == (128, 128)
    texts = ["short", "word " * 300, ""]
    padded = tok.encode_batch(texts, max_length=tok.declared_max_length).pad(tok.declared_padding_length)
    enc = ref.encode_batch(texts)
    np.testing.assert_array_equal(padded.input_ids, [e.ids for e in enc])
    np.testing.assert_array_equal(padded.attention_mask, [e.attention_mask for e in enc])
    np.testing.assert_array_equal(padded.token_type_ids, [e.type_ids for e in enc])


def test_pad_to_longest_matches_hf(tok, hf):
    ref = hf_tokenizers.Tokenizer.from_str(hf.to_str())
    ref.enable_padding(pad_id=tok.pad_id, pad_token="[PAD]")
    texts = NASTY[:12]
    padded = tok.encode_batch(texts).pad()
    enc = ref.encode_batch(texts)
    for got, field in (
        (padded.input_ids, "ids"),
        (padded.attention_mask, "attention_mask"),
        (padded.token_type_ids, "type_ids"),
    ):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, [getattr(e, field) for e in enc])


def test_left_padding_declared_in_file(model_dir, tmp_path):
    path = _variant(model_dir, tmp_path, lambda d: d["padding"].update(direction="Left"))
    ours = WordPieceTokenizer.from_pretrained(path)
    ref = hf_tokenizers.Tokenizer.from_file(str(path))
    ref.no_truncation()
    ref.enable_padding(direction="left", pad_id=0)
    texts = ["a b c d", "", "hello"]
    padded = ours.encode_batch(texts).pad()
    enc = ref.encode_batch(texts)
    np.testing.assert_array_equal(padded.input_ids, [e.ids for e in enc])
    np.testing.assert_array_equal(padded.attention_mask, [e.attention_mask for e in enc])


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_decode_matches_hf(tok, hf, text):
    ids = hf.encode(text).ids
    assert tok.decode(ids) == hf.decode(ids)
    assert tok.decode(ids, skip_special_tokens=False) == hf.decode(ids, skip_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == hf.encode(text).tokens


REFUSED = {
    "model.type": lambda d: d["model"].update(type="BPE"),
    "normalizer": lambda d: d.update(normalizer={"type": "NFKC"}),
    "pre_tokenizer": lambda d: d.update(pre_tokenizer={"type": "Whitespace"}),
    "added_tokens[0].lstrip": lambda d: d["added_tokens"][0].update(lstrip=True),
    "added_tokens[1].normalized": lambda d: d["added_tokens"][1].update(normalized=True),
    "truncation.direction": lambda d: d["truncation"].update(direction="Left"),
    "padding.pad_to_multiple_of": lambda d: d["padding"].update(pad_to_multiple_of=8),
    "post_processor.type": lambda d: d["post_processor"].update(type="RobertaProcessing"),
    "decoder.type": lambda d: d["decoder"].update(type="ByteLevel"),
    "normalizer.{separate_numbers}": lambda d: d["normalizer"].update(separate_numbers=True),
}


@pytest.mark.parametrize("where", sorted(REFUSED))
def test_unsupported_settings_are_refused_by_name(model_dir, tmp_path, where):
    path = _variant(model_dir, tmp_path, REFUSED[where])
    with pytest.raises(UnsupportedTokenizerError) as err:
        WordPieceTokenizer.from_pretrained(path)
    assert where in str(err.value)


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(TokenizerConfigError, match=r"neither tokenizer\.json nor vocab\.txt"):
        WordPieceTokenizer.from_pretrained(tmp_path)
    with pytest.raises(TokenizerConfigError, match="does not exist"):
        WordPieceTokenizer.from_pretrained(tmp_path / "nope")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerConfigError, match="cannot read"):
        WordPieceTokenizer.from_pretrained(tmp_path)
