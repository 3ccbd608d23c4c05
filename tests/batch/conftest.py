"""Small generated inputs for the batch tests (real model, a few dozen short texts)."""

from __future__ import annotations

import json

import pytest

TEXTS = [f"sentence {i}: " + " ".join(["word"] * (i % 9)) + (" Ünïcödé ✓" if i % 4 == 0 else "") for i in range(40)]


@pytest.fixture(scope="session")
def texts():
    return list(TEXTS)


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in TEXTS), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def embedder():
    from openhood import Embedder

    return Embedder.from_pretrained(None, threads=1)
