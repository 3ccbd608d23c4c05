"""Byte-level BPE's fixed tables: bytes ↔ printable characters, the pre-tokenizer regex and its classes.

GPT-2 style vocabularies store tokens as strings over 256 printable stand-ins for the bytes
(``Ġ`` is the space byte 0x20), so every byte sequence is spellable and nothing is ever unknown.
The pre-tokenizer cuts text into pieces that merges never cross. SmolLM2 (llama.cpp's
``smollm`` rule, HF's ``Digits(individual_digits) + ByteLevel``) first isolates every numeric
character, then applies GPT-2's regex to what is between them. We fold both stages into one
Python ``re`` pattern (see ``pretokenizer_pattern``); ``\\p{L}``/``\\p{N}`` and the White_Space
set are spelled out as explicit classes built from ``unicodedata`` once, because ``re`` has no
Unicode property classes and its ``\\s`` also matches U+001C..U+001F, which Oniguruma does not.
That pattern is the reference; the fast path (``bpe_kernel``) runs the same rule as a state
machine over ``code_point_classes``, a class per code point from the same sources.
The trade-off: the classes follow Python's Unicode version (14.0 on 3.11), so a code point
assigned later than that may be classed differently from the reference's newer tables: HF
``tokenizers`` 0.23 classes 9,405 code points that are unassigned (Cn) in Unicode 14 as
\\p{L} (9,272, e.g. U+1C89 and CJK/Tangut extensions) or \\p{N} (133), and ids around them
differ; none occurs in the dev corpus.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache

import numpy as np


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


# Unicode White_Space (what Oniguruma's and llama.cpp's \s match).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _ranges_class(pred) -> str:
    """A regex class body for all code points where ``pred(category)`` holds, as merged ranges."""
    parts: list[str] = []
    start, prev = -1, -1
    for cp in range(sys.maxunicode + 1):
        if pred(unicodedata.category(chr(cp))):
            if start < 0:
                start = cp
            prev = cp
        elif start >= 0:
            parts.append(re.escape(chr(start)) if start == prev else f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
            start = -1
    if start >= 0:
        parts.append(f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
    return "".join(parts)


@lru_cache(maxsize=1)
def letter_and_number_classes() -> tuple[str, str]:
    """(\\p{L}, \\p{N}) class bodies: categories L* and Nd/Nl/No (Rust's ``char::is_numeric``)."""
    return _ranges_class(lambda c: c[0] == "L"), _ranges_class(lambda c: c[0] == "N")


@lru_cache(maxsize=1)
def code_point_classes() -> np.ndarray:
    """Class of every code point for the numba pre-tokenizer: 0 other, 1 \\p{L}, 2 \\p{N}, 3 White_Space.

    Built from the same ``unicodedata`` categories and ``WHITESPACE`` set as the pattern's classes
    (one pass, ~0.3 s, once per process); ``bpe_kernel`` uses the same numbering.
    """
    major = np.frombuffer(
        "".join(unicodedata.category(chr(cp))[0] for cp in range(sys.maxunicode + 1)).encode(), np.uint8
    )
    table = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    table[major == ord("L")] = 1
    table[major == ord("N")] = 2
    for lo, hi in re.findall(r"(.)(?:-(.))?", WHITESPACE, flags=re.DOTALL):
        table[ord(lo) : ord(hi or lo) + 1] = 3
    return table


@lru_cache(maxsize=4)
def pretokenizer_pattern(split_digits: bool = True) -> re.Pattern:
    """GPT-2's split, optionally after isolating every numeric character (SmolLM2's ``smollm`` rule).

    With digits isolated first, GPT-2's regex runs on the stretches between them, so a digit
    ends a stretch: `` ?\\p{N}+`` becomes a single bare ``\\p{N}`` and the trailing-space rule
    ``\\s+(?!\\S)`` treats a following digit like the end of text.

    >>> pretokenizer_pattern().findall("I've 42  apples")
    ['I', "'ve", ' ', '4', '2', ' ', ' apples']
    """
    L, N = letter_and_number_classes()
    S = WHITESPACE
    contractions = r"'s|'t|'re|'ve|'m|'ll|'d"
    if split_digits:
        pat = rf"[{N}]|{contractions}| ?[{L}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}{N}])|[{S}]+"
    else:
        pat = rf"{contractions}| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+"
    return re.compile(pat)
