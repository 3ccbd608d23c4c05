"""Shared fixtures: the default model and its tokenizer, loaded once per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bert():
    from openhood.engine.models.bert import load_bert
    from openhood.models import default_model_dir

    return load_bert(default_model_dir())


@pytest.fixture(scope="session")
def tokenizer(bert):
    from openhood.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrained(bert.folder)
