"""Fixtures shared across test packages: the committed PyTorch reference set.

`scripts/make_reference.py` made it once in a separate torch venv; tests never import torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def reference():
    meta = json.loads((FIXTURES / "reference_texts.json").read_text(encoding="utf-8"))
    emb = np.load(FIXTURES / "reference_embeddings.npy", allow_pickle=False)
    assert emb.shape == (len(meta["texts"]), 384)
    return meta["texts"], emb


@pytest.fixture(scope="session")
def smollm2_path():
    from openhood.generate.bundled import default_gguf_path

    return default_gguf_path()


@pytest.fixture(scope="session")
def smollm2_gen(smollm2_path):
    """The bundled SmolLM2-135M-Instruct Generator, loaded once for the whole session (~0.5 GB)."""
    from openhood.generate import Generator

    return Generator(smollm2_path)


@pytest.fixture(scope="session")
def smollm2(smollm2_gen):
    return smollm2_gen.model


@pytest.fixture(scope="session")
def smollm2_tok(smollm2_gen):
    return smollm2_gen.tokenizer
