"""GGUF reading: metadata, shapes, Q4_1/Q8_0 dequantization (naive reference, vectorized, and the
``gguf`` package's own numpy dequantizer), the Q/K permutation round trip."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.formats.gguf import (
    BLOCK_BYTES,
    QK,
    GGUFError,
    GGUFFile,
    dequantize,
    dequantize_block_naive,
    permute_qk,
    unpermute_qk,
)
from openhood.generate.bundled import default_gguf_path


@pytest.fixture(scope="module")
def gguf_file():
    return GGUFFile(default_gguf_path())


def test_metadata_matches_the_model_card(gguf_file):
    g = gguf_file
    assert g.require("general.architecture") == "llama"
    assert g.require("llama.block_count") == 30
    assert g.require("llama.embedding_length") == 576
    assert g.require("llama.attention.head_count_kv") == 3
    assert g.require("tokenizer.ggml.pre") == "smollm"
    assert len(g.require("tokenizer.ggml.merges")) == 48900
    assert "output.weight" not in g.tensors  # tied LM head
    assert g.tensors["token_embd.weight"].kind == "Q8_0"
    assert g.tensors["token_embd.weight"].shape == (49152, 576)
    assert g.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    with pytest.raises(GGUFError, match="missing"):
        g.require("no.such.key")


@pytest.mark.parametrize("name", ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight"])
def test_vectorized_dequantization_equals_naive_blocks(gguf_file, name):
    t = gguf_file.tensors[name]
    w = dequantize(t)
    bb = BLOCK_BYTES[t.kind]
    rng = np.random.default_rng(0)
    for row in rng.integers(0, t.shape[0], 4):
        for blk in rng.integers(0, t.shape[1] // QK, 3):
            block = bytes(t.raw[row, blk * bb : (blk + 1) * bb])
            ref = np.array(dequantize_block_naive(t.kind, block), np.float32)
            np.testing.assert_array_equal(w[row, blk * QK : (blk + 1) * QK], ref)


def test_dequantization_equals_gguf_package(gguf_file):
    import gguf

    for name in ("token_embd.weight", "blk.7.ffn_gate.weight"):
        t = gguf_file.tensors[name]
        ref = gguf.quants.dequantize(np.asarray(t.raw[:64]), gguf.GGMLQuantizationType[t.kind])
        np.testing.assert_array_equal(dequantize(t)[:64], ref)


def test_qk_permutation_round_trips_and_moves_halves_to_pairs():
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)  # 2 heads of dim 8
    p = permute_qk(w, 2)
    np.testing.assert_array_equal(unpermute_qk(p, 2), w)
    # head 0: rows [0..3 | 4..7] become pairs (0,4),(1,5),...
    assert p[:8, 0].tolist() == [0, 12, 3, 15, 6, 18, 9, 21]


def test_not_a_gguf_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not gguf at all" * 10)
    with pytest.raises(GGUFError):
        GGUFFile(bad)
    with pytest.raises(GGUFError, match="no such file"):
        GGUFFile(tmp_path / "absent.gguf")


def test_reader_matches_the_gguf_package_on_every_key_and_tensor(gguf_file):
    """The mmap reader against the maintained ``GGUFReader``: same metadata values (types
    included), same tensor names, kinds, shapes and bytes."""
    from gguf import GGUFReader

    ref = GGUFReader(gguf_file.path, "r")
    expected = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(gguf_file.metadata) == list(expected)
    for key, value in expected.items():
        got = gguf_file.metadata[key]
        assert got == value and type(got) is type(value), key
        if isinstance(value, list) and value:
            assert {type(x) for x in got} == {type(x) for x in value}, key
    assert list(gguf_file.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = gguf_file.tensors[t.name]
        assert mine.kind == t.tensor_type.name
        assert mine.shape == tuple(int(d) for d in reversed(t.shape.tolist()))
        assert mine.raw.dtype == t.data.dtype and mine.raw.shape == t.data.shape
        assert not mine.raw.flags.writeable
        np.testing.assert_array_equal(mine.raw, t.data)


def test_truncated_file_is_a_clear_error(tmp_path):
    data = default_gguf_path().read_bytes()[:100_000]  # header and part of the vocabulary
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data)
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        GGUFFile(cut)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError):
        GGUFFile(empty)
