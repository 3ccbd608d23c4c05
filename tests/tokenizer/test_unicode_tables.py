"""The committed character tables equal a fresh probe of HF, and respect what the kernel assumes."""

from __future__ import annotations

import unicodedata

import pytest
from gen_unicode_tables import code_points, probe

from openhood.tokenizer import unicode_tables as ut

# Planes 0-3 and 14 hold every assigned character; planes 4-13 (unassigned) and 15-16 (private
# use) are sampled, which keeps this test at a third of the full probe's 10 s.
SAMPLE = frozenset(cp for cp in code_points() if cp >> 16 in (0, 1, 2, 3, 14) or cp % 251 == 0)


@pytest.fixture(scope="module")
def probed():
    return probe(sorted(SAMPLE))


@pytest.mark.parametrize(
    "name,key",
    [
        ("CONTROL", "control"),
        ("CLEAN_SPACE", "clean_space"),
        ("WHITESPACE", "space"),
        ("PUNCTUATION", "punct"),
        ("NONSPACING_MARKS", "marks"),
    ],
)
def test_ranges_match_fresh_probe(probed, name, key):
    committed = {cp for a, b in getattr(ut, name) for cp in range(a, b + 1)}
    assert committed & SAMPLE == probed[key]


def test_fixups_match_fresh_probe(probed):
    assert {cp: s for cp, s in ut.NFD_FIXES.items() if cp in SAMPLE} == probed["nfd_fix"]
    assert {cp: s for cp, s in ut.LOWERCASE_FIXES.items() if cp in SAMPLE} == probed["lower_fix"]


def test_kernel_assumptions():
    # The REMAP class rewrites one code point into one, for chars Python leaves alone.
    for cp, low in ut.LOWERCASE_FIXES.items():
        assert len(low) == 1 and chr(cp).lower() == chr(cp)
    # NFD fix-ups are starters, so normalizing around them cannot reorder marks across them.
    assert all(unicodedata.combining(chr(cp)) == 0 for cp in ut.NFD_FIXES)
    # clean_text maps to ' ' only characters the pre-tokenizer also splits on.
    spaces = {cp for a, b in ut.WHITESPACE for cp in range(a, b + 1)}
    assert all(cp in spaces for a, b in ut.CLEAN_SPACE for cp in range(a, b + 1))
