"""Shared fixtures: our tokenizer and HF ``tokenizers`` (the reference) on the bundled model."""

from __future__ import annotations

import pytest
from id_helpers import hf_tokenizers

from openhood.models import default_model_dir


@pytest.fixture(scope="session")
def model_dir():
    return default_model_dir()


@pytest.fixture(scope="session")
def tok(model_dir):
    from openhood.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def hf(model_dir):
    """HF's tokenizer with the file's truncation/padding switched off: our max_length=None."""
    ref = hf_tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ref.no_truncation()
    ref.no_padding()
    return ref
