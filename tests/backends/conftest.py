"""Shared fixtures for backend tests: the committed PyTorch reference set, backends built once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def reference():
    meta = json.loads((FIXTURES / "reference_texts.json").read_text(encoding="utf-8"))
    emb = np.load(FIXTURES / "reference_embeddings.npy", allow_pickle=False)
    assert emb.shape == (len(meta["texts"]), 384)
    return meta["texts"], emb


@pytest.fixture(scope="session")
def embedders():
    """name → Embedder; built lazily so a failing backend fails only its own tests."""
    from openhood import Embedder

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = Embedder.from_pretrained(backend=name)
        return cache[name]

    return get
