"""Shared fixtures: the default model loaded once per session, the committed reference set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def bert():
    from openhood.engine.bert import load_bert

    return load_bert()


@pytest.fixture(scope="session")
def tokenizer(bert):
    from openhood.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(bert.folder)


@pytest.fixture(scope="session")
def reference():
    meta = json.loads((FIXTURES / "reference_texts.json").read_text(encoding="utf-8"))
    emb = np.load(FIXTURES / "reference_embeddings.npy", allow_pickle=False)
    assert emb.shape == (len(meta["texts"]), 384)
    return meta["texts"], emb
