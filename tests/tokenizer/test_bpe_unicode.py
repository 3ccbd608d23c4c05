"""Every code point through the byte-level BPE tokenizer gives HF's ids, and the committed class
tables (``bpe_unicode_tables``) equal a fresh probe of HF and respect what the kernel assumes.

The all-code-point check runs against digests HF produced once (``gen_bpe_unicode_tables.py``),
so it needs no HF at test time; the re-probe of a sample needs HF and is skipped without it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gen_bpe_unicode_tables import BLOCK, CONTEXTS, MAX_CP, block_texts, code_points, digest, probe

from openhood.generate.bundled import default_gguf_path
from openhood.tokenizer import bpe_unicode_tables as bt
from openhood.tokenizer.bpe import BPETokenizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bpe_codepoint_digests.json"


def _set(ranges) -> set[int]:
    return {cp for a, b in ranges for cp in range(a, b + 1)}


NUMERIC = bt.NUMBER + bt.NUMERIC_EXTRA  # what Digits isolates: \p{N} and a few newer digits


@pytest.fixture(scope="module")
def fixture():
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.from_pretrained(default_gguf_path())


def block_code_points(block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``block_texts(block)`` as the kernel's input (UTF-32 code points, starts, ends), built in NumPy."""
    chars = np.asarray(code_points(range(block * BLOCK, (block + 1) * BLOCK)), dtype=np.uint32)
    flat, starts, ends, at = [], [], [], 0
    for ctx in CONTEXTS:
        cols = []  # one column per character of the context, the probed code point for "{c}"
        for k, literal in enumerate(ctx.split("{c}")):
            if k:
                cols.append(chars)
            cols.extend(np.full(chars.size, ord(ch), np.uint32) for ch in literal)
        flat.append(np.stack(cols, axis=1).ravel())
        starts.append(at + len(cols) * np.arange(chars.size, dtype=np.int64))
        ends.append(starts[-1] + len(cols))
        at += flat[-1].size
    return np.concatenate(flat), np.concatenate(starts), np.concatenate(ends)


def test_block_code_points_are_the_probe_texts():
    cps, starts, ends = block_code_points(0xD)  # U+D000..: surrogates skipped
    texts = [cps[a:b].astype("<u4").tobytes().decode("utf-32-le") for a, b in zip(starts, ends, strict=True)]
    assert texts == block_texts(0xD)


@pytest.mark.parametrize("split_digits,key", [(True, "digests"), (False, "digests_gpt2_rule")])
def test_every_code_point_in_every_context_matches_hf(bpe, fixture, split_digits, key):
    assert fixture["contexts"] == list(CONTEXTS) and fixture["block"] == BLOCK, "stale: rerun the generator"
    tok = bpe if split_digits else BPETokenizer(replace(bpe.spec, split_digits=False))
    no_specials = np.zeros((0, 3), dtype=np.int64)
    differ = []
    for block, want in enumerate(fixture[key]):
        ids, lengths = tok._encode_code_points(*block_code_points(block), no_specials)
        if digest(ids, lengths) != want:
            differ.append(f"U+{block * BLOCK:04X}..U+{(block + 1) * BLOCK - 1:04X}")
    assert len(fixture[key]) == MAX_CP // BLOCK
    assert differ == [], f"ids differ from HF in {len(differ)} blocks: {differ[:10]}"


# Planes 0 and 1 in full (every script, and most of what Python 3.11's Unicode 14 lacks), the CJK
# extension planes 2-3 and the rest sampled: a fresh probe that takes ~1 s instead of ~10 s.
SAMPLE = frozenset(cp for cp in code_points() if cp >> 16 in (0, 1) or cp % 61 == 0)


@pytest.fixture(scope="module")
def probed():
    pytest.importorskip("tokenizers")
    return probe(sorted(SAMPLE))


@pytest.mark.parametrize(
    "name,key", [("LETTER", "letter"), ("NUMBER", "number"), ("WHITESPACE", "whitespace"), ("NUMERIC", "numeric")]
)
def test_tables_match_a_fresh_probe_of_hf(probed, name, key):
    assert _set(NUMERIC if name == "NUMERIC" else getattr(bt, name)) & SAMPLE == probed[key]


def test_kernel_assumptions():
    letter, number, space, numeric = (_set(r) for r in (bt.LETTER, bt.NUMBER, bt.WHITESPACE, NUMERIC))
    # One class per code point; the regex's \s is the ASCII/Unicode set without U+001C..U+001F.
    assert not (letter & number or letter & space or number & space)
    assert space == {9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029}.union(
        {0x202F, 0x205F, 0x3000}
    )
    # With digits split, every \p{N} is isolated by Digits first, so the pattern needs no ' ?\p{N}+'.
    assert number <= numeric
    assert not numeric & (letter | space)


def test_code_points_python_3_11_does_not_know(bpe):
    # U+1C89 (Cyrillic, Unicode 16) is a letter to HF; U+11DE0 (Unicode 17) a digit to Digits only.
    assert bpe._classes[0x1C89] == 1 and bpe._classes[0x11DE0] == 2
    gpt2 = BPETokenizer(replace(bpe.spec, split_digits=False))
    assert gpt2._classes[0x11DE0] == 0 and gpt2._classes[0x1CCF0] == 2  # outlined digit (Unicode 16): \p{N}
    texts = ["a\u1c89b \u1c89", "\U00011de0\U00011de0 x", " \U0002b740\U0002b741", "1\U0001ccf0 \U0001ccf1!"]
    for tok in (bpe, gpt2):
        assert [tok.encode(t).tolist() for t in texts] == [tok.encode_reference(t) for t in texts]
    pytest.importorskip("tokenizers")
    from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer

    for tok in (bpe, gpt2):
        assert [tok.encode(t).tolist() for t in texts] == [
            e.ids for e in hf_bpe_tokenizer(tok.spec).encode_batch(texts)
        ]
