"""Byte-level BPE's fixed tables: bytes ↔ printable characters, the pre-tokenizer regex and its classes.

GPT-2 style vocabularies store tokens as strings over 256 printable stand-ins for the bytes
(``Ġ`` is the space byte 0x20), so every byte sequence is spellable and nothing is ever unknown.
The pre-tokenizer cuts text into pieces that merges never cross. SmolLM2 (llama.cpp's
``smollm`` rule, HF's ``Digits(individual_digits) + ByteLevel``) first isolates every numeric
character, then applies GPT-2's regex to what is between them. We fold both stages into one
Python ``re`` pattern (see ``pretokenizer_pattern``), the reference; the fast path
(``bpe_kernel``) runs the same rule as a state machine over ``code_point_classes``, a class per
code point. Both take their classes from ``bpe_unicode_tables``: ``\\p{L}``, ``\\p{N}`` and
``\\s`` as HF's regex engine (Oniguruma) sees them and what ``Digits`` isolates (Rust's
``char::is_numeric``), probed from HF ``tokenizers`` once per code point and committed as ranges,
because ``re`` has no property classes, its ``\\s`` also matches U+001C..U+001F, and Python 3.11's
``unicodedata`` (Unicode 14) leaves 9,405 code points unassigned that the reference classes as
letters or numbers. Building the table from ranges takes ~1 ms instead of ~0.3 s for a pass over
``unicodedata``. The trade-off: the classes are pinned to the ``tokenizers`` version that was
probed (0.23.3); a newer reference with newer Unicode tables needs the generator re-run
(``tests/tokenizer/gen_bpe_unicode_tables.py``; ``test_bpe_unicode`` re-probes a sample and checks
every code point's ids against the committed digests).
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache

import numpy as np

from openhood.tokenizer import bpe_unicode_tables as bt


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → character table: printable Latin-1 bytes map to themselves, the rest to U+0100 on.

    >>> bytes_to_unicode()[ord(" ")], bytes_to_unicode()[ord("a")]
    ('Ġ', 'a')
    """
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


# Class numbers of ``code_point_classes`` (``bpe_kernel`` uses the same).
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


@lru_cache(maxsize=2)
def code_point_classes(split_digits: bool = True) -> np.ndarray:
    """Class of every code point (0 other, 1 \\p{L}, 2 \\p{N}, 3 \\s), as HF's pre-tokenizer sees it.

    Filled from ``bpe_unicode_tables``' ranges (a few hundred slice assignments, ~1 ms). With
    ``split_digits`` the number class is what ``Digits`` isolates (Rust's ``char::is_numeric``, a
    superset of the regex's \\p{N}), and it wins over the other classes, since ``Digits`` runs first.
    Read-only: it is shared by every tokenizer in the process.
    """
    table = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    for ranges, cls in (
        (bt.LETTER, LETTER),
        (bt.WHITESPACE, SPACE),
        (bt.NUMBER + bt.NUMERIC_EXTRA if split_digits else bt.NUMBER, NUMBER),
    ):
        for lo, hi in ranges:
            table[lo : hi + 1] = cls
    table.flags.writeable = False
    return table


def _class_body(table: np.ndarray, cls: int) -> str:
    """A regex class body (``a-zA-Z...``) for the code points of class ``cls``, as merged ranges."""
    cps = np.flatnonzero(table == cls)
    if cps.size == 0:
        return ""
    cut = np.flatnonzero(np.diff(cps) != 1)
    los, his = cps[np.r_[0, cut + 1]].tolist(), cps[np.r_[cut, cps.size - 1]].tolist()
    e = re.escape
    return "".join(e(chr(lo)) if lo == hi else f"{e(chr(lo))}-{e(chr(hi))}" for lo, hi in zip(los, his, strict=True))


@lru_cache(maxsize=2)
def pattern_classes(split_digits: bool = True) -> tuple[str, str, str]:
    """(\\p{L}, \\p{N}, \\s) class bodies for ``pretokenizer_pattern``: the same sets as ``code_point_classes``."""
    table = code_point_classes(split_digits)
    return _class_body(table, LETTER), _class_body(table, NUMBER), _class_body(table, SPACE)


@lru_cache(maxsize=4)
def pretokenizer_pattern(split_digits: bool = True) -> re.Pattern:
    """GPT-2's split, optionally after isolating every numeric character (SmolLM2's ``smollm`` rule).

    With digits isolated first, GPT-2's regex runs on the stretches between them, so a digit
    ends a stretch: `` ?\\p{N}+`` becomes a single bare ``\\p{N}`` and the trailing-space rule
    ``\\s+(?!\\S)`` treats a following digit like the end of text.

    >>> pretokenizer_pattern().findall("I've 42  apples")
    ['I', "'ve", ' ', '4', '2', ' ', ' apples']
    """
    L, N, S = pattern_classes(split_digits)
    contractions = r"'s|'t|'re|'ve|'m|'ll|'d"
    if split_digits:
        pat = rf"[{N}]|{contractions}| ?[{L}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}{N}])|[{S}]+"
    else:
        pat = rf"{contractions}| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+"
    return re.compile(pat)
