"""Byte-level BPE (SmolLM2 from its GGUF): exact ids vs HF ``tokenizers`` built with the right
pre-tokenizer and vs llama.cpp's recorded ids; decode round trip; streaming decode of split UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bpe_cases import BPE_NASTY
from hypothesis import given, settings
from hypothesis import strategies as st
from id_helpers import hf_ids, our_ids

from openhood.generate.bundled import default_gguf_path
from openhood.tokenizer.bpe import BPETokenizer
from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bpe_llamacpp.json"
DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "dev_corpus.jsonl"
DEV = DEV if DEV.is_file() else Path("/work/shared/data/dev_corpus.jsonl")


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.from_pretrained(default_gguf_path())


@pytest.fixture(scope="module")
def hf_bpe(bpe):
    return hf_bpe_tokenizer(bpe.spec)


@pytest.fixture(scope="module")
def llamacpp():
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("text", BPE_NASTY, ids=range(len(BPE_NASTY)))
def test_nasty_case_matches_hf(bpe, hf_bpe, text):
    assert bpe.encode(text).tolist() == hf_bpe.encode(text).ids


def test_nasty_cases_match_llamacpp(bpe, llamacpp):
    assert [r["text"] for r in llamacpp["nasty"]] == BPE_NASTY, "fixture is stale: rerun scripts/make_bpe_fixtures.py"
    assert [bpe.encode(r["text"]).tolist() for r in llamacpp["nasty"]] == [r["ids"] for r in llamacpp["nasty"]]


@pytest.mark.skipif(not DEV.is_file(), reason="dev corpus not present")
def test_dev_corpus_sample_matches_llamacpp_and_hf(bpe, hf_bpe, llamacpp):
    lines = DEV.read_text(encoding="utf-8").splitlines()
    texts = [json.loads(lines[r["line"]])["text"] for r in llamacpp["dev"]]
    ours = our_ids(bpe, texts)
    assert ours == [r["ids"] for r in llamacpp["dev"]]
    assert ours == hf_ids(hf_bpe, texts)


def test_digits_split_alone_unlike_gpt2(bpe):
    # "a 12": smollm gives 'a', ' ', '1', '2' (GPT-2's rule would give 'a', ' 12').
    assert bpe.convert_ids_to_tokens(bpe.encode("a 12")) == ["a", "Ġ", "1", "2"]


def test_special_tokens_parsed_or_not(bpe):
    assert bpe.encode("<|im_start|>hi").tolist()[0] == 1
    plain = bpe.encode("<|im_start|>hi", parse_special=False).tolist()
    assert 1 not in plain and bpe.decode(plain, skip_special_tokens=False) == "<|im_start|>hi"


@pytest.mark.parametrize("text", BPE_NASTY[:40], ids=range(40))
def test_decode_round_trips(bpe, hf_bpe, text):
    ids = bpe.encode(text).tolist()
    assert bpe.decode(ids, skip_special_tokens=False) == hf_bpe.decode(ids, skip_special_tokens=False)
    assert bpe.decode(ids) == hf_bpe.decode(ids)  # both skip special tokens by default
    if all(ord(c) > 0x1F or c in "\t\n\r" for c in text):  # bytes absent from the vocab are dropped
        assert bpe.decode(ids, skip_special_tokens=False) == text


def test_stream_decoder_holds_partial_utf8(bpe):
    # Feed a multi-byte character one byte-token at a time: nothing comes out until it is complete.
    ids = [bpe.vocab[bpe.tokens[bpe._byte_id[b]]] for b in "é😀".encode()]
    dec = bpe.stream_decoder()
    pieces = [dec.push(i) for i in ids]
    assert pieces == ["", "é", "", "", "", "😀"]
    assert dec.push(bpe.eos_id) == "" and dec.flush() == ""
    dec.push(ids[2])
    assert dec.flush() == "\ufffd"


_alphabet = st.one_of(
    st.characters(codec="utf-8"), st.sampled_from(list(" \t\n0123456789'sdlmtvre,.!?Ġ中😀\u0301\u00a0"))
)


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.text(alphabet=_alphabet, max_size=40), min_size=1, max_size=6))
def test_random_text_matches_hf(bpe, hf_bpe, texts):
    assert our_ids(bpe, texts) == hf_ids(hf_bpe, texts)


def test_tokenize_command_reads_gguf(tmp_path, capsys, bpe):
    from openhood.cli import main

    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    texts = ["a 12 apples", "<|im_start|>x", "naïve 😀"]
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    assert main(["tokenize", "--model", str(default_gguf_path()), "--input", str(src), "--output", str(dst)]) == 0
    rows = [json.loads(line)["ids"] for line in dst.read_text().splitlines()]
    assert rows == [bpe.encode(t).tolist() for t in texts]
    assert main(["tokenize", "--model", str(default_gguf_path()), "a 12"]) == 0
    assert "a Ġ 1 2" in capsys.readouterr().out
    assert main(["tokenize", "--model", str(tmp_path / "absent.gguf"), "x"]) == 2


@pytest.mark.parametrize("text", BPE_NASTY, ids=range(len(BPE_NASTY)))
def test_numba_merges_equal_python_reference(bpe, text):
    assert bpe.encode(text).tolist() == bpe.encode_reference(text)
