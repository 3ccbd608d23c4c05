"""Helpers the tokenizer tests import: HF ``tokenizers`` (skipped if absent) and id lists to compare.

A plain module, not ``conftest``: several test folders have a conftest.py, so importing
helpers from "conftest" would pick whichever one was imported first.
"""

from __future__ import annotations

import pytest

hf_tokenizers = pytest.importorskip("tokenizers")


def hf_ids(ref, texts):
    return [e.ids for e in ref.encode_batch(list(texts))]


def our_ids(tokenizer, texts):
    return [row.tolist() for row in tokenizer.encode_batch(list(texts))]
