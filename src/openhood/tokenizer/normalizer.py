"""BERT normalization, split between C-speed string operations and a per-code-point class table.

HF's ``BertNormalizer`` runs, in order: clean_text (drop controls, U+0000, U+FFFD; whitespace →
' '), handle_chinese_chars (pad CJK ideographs with spaces), strip_accents (NFD, drop Mn) and
lowercase (Rust ``char::to_lowercase``, char by char). Then ``BertPreTokenizer`` splits on
whitespace and isolates punctuation. We get the same result cheaper:

- the *string* part (NFD and lowercasing) uses CPython's C implementations on a whole batch
  joined into one string (``prepare``); a handful of code points where Python's Unicode 14 data
  disagrees with HF's Rust crates are fixed up first (``unicode_tables``);
- every *per-character* decision (drop, whitespace, punctuation, CJK, word) is one lookup in a
  ``(0x110000,)`` uint8 class table that the numba kernel reads (``class_table``), so dropping
  controls and marks, padding CJK and pre-tokenizing all happen in a single pass over code points.
  The 55 code points that Rust lowercases and Python 3.11 does not (Unicode 15/16 additions, all
  one-to-one) are the REMAP class, rewritten by the kernel (``lowercase_remap``): scanning for
  them with a regex cost 0.7 s on the dev corpus, the kernel check is free.

Why that order is still exact: lowercasing never creates a control, whitespace, punctuation or
CJK character, and with strip_accents on, lowercasing after NFD creates no new Mn character (the
only lowercase mapping that emits one, U+0130, is decomposed by NFD first), so dropping marks
after lowercasing instead of before gives the same string. ``tests/tokenizer`` checks this for
every code point against HF.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from openhood.tokenizer import unicode_tables as ut

MAX_CODE_POINT = 0x110000

# Code point classes read by the kernel (uint8).
WORD, DROP, SPACE, PUNCT, CJK, REMAP = 0, 1, 2, 3, 4, 5

# HF's is_chinese_char: the CJK Unified Ideographs blocks and compatibility ideographs.
CJK_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)

_CAPITAL_SIGMA, _SMALL_SIGMA = "\u03a3", "\u03c3"


def _char_class_re(code_points) -> re.Pattern | None:
    chars = "".join(re.escape(chr(cp)) for cp in sorted(code_points))
    return re.compile(f"([{chars}])") if chars else None


_NFD_FIX_RE = _char_class_re(ut.NFD_FIXES)


def _fill(table: np.ndarray, ranges, value: int, only_where=None) -> None:
    for start, end in ranges:
        view = table[start : end + 1]
        if only_where is None:
            view[:] = value
        else:
            view[view == only_where] = value


@dataclass(frozen=True)
class BertNormalizer:
    """The options of HF's ``BertNormalizer``; ``strip_accents`` is already resolved (None → lowercase)."""

    clean_text: bool = True
    handle_chinese_chars: bool = True
    strip_accents: bool = True
    lowercase: bool = True

    def prepare(self, text: str) -> str:
        """NFD and lowercase with HF's exact semantics; character dropping is left to the class table.

        >>> [hex(ord(c)) for c in BertNormalizer().prepare("Café")]  # NFD: the mark stays, the kernel drops it
        ['0x63', '0x61', '0x66', '0x65', '0x301']
        >>> BertNormalizer().prepare("ΟΔΟΣ")  # char by char, like Rust: no final-sigma rule
        'οδοσ'
        """
        if text.isascii():
            return text.lower() if self.lowercase else text
        if self.strip_accents:
            text = self._nfd(text)
        if self.lowercase:
            # Rust lowercases char by char: no Final_Sigma rule, so Σ is always σ.
            if _CAPITAL_SIGMA in text:
                text = text.replace(_CAPITAL_SIGMA, _SMALL_SIGMA)
            text = text.lower()
        return text

    @staticmethod
    def _nfd(text: str) -> str:
        if _NFD_FIX_RE is None or not _NFD_FIX_RE.search(text):
            return unicodedata.normalize("NFD", text)
        # The split captures the fixed code points at odd indices; they are starters (ccc 0), so
        # normalizing the pieces apart cannot change canonical ordering.
        pieces = _NFD_FIX_RE.split(text)
        return "".join(ut.NFD_FIXES[ord(p)] if i % 2 else unicodedata.normalize("NFD", p) for i, p in enumerate(pieces))

    @cached_property
    def class_table(self) -> np.ndarray:
        """(0x110000,) uint8: the class of each code point *after* ``prepare``."""
        table = np.full(MAX_CODE_POINT, WORD, dtype=np.uint8)
        _fill(table, ut.WHITESPACE, SPACE)
        _fill(table, ut.PUNCTUATION, PUNCT)
        if self.handle_chinese_chars:
            _fill(table, CJK_RANGES, CJK, only_where=WORD)
        if self.strip_accents:
            _fill(table, ut.NONSPACING_MARKS, DROP)
        if self.clean_text:
            # Precedence matters: U+000B, U+000C, U+0085 are both controls and Rust whitespace,
            # and clean_text removes them before the pre-tokenizer could split on them.
            _fill(table, ut.CONTROL, DROP)
            table[0] = DROP
            table[0xFFFD] = DROP
        if self.lowercase:
            table[self.lowercase_remap[0]] = REMAP
        return table

    @cached_property
    def lowercase_remap(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted source code points, their Rust lowercase), both (k,) uint32; empty if not lowercasing."""
        fixes = sorted(ut.LOWERCASE_FIXES.items()) if self.lowercase else []
        src = np.asarray([cp for cp, _ in fixes], dtype=np.uint32)
        dst = np.asarray([ord(low) for _, low in fixes], dtype=np.uint32)  # one-to-one: checked by the tests
        return src, dst
