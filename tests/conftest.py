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
def effnet_dir(tmp_path_factory) -> Path:
    """The packaged EfficientNet-Lite0 .pth converted once per session by ``openhood convert``."""
    from openhood.cli import main
    from openhood.engine.efficientnet import bundled_checkpoint

    out = tmp_path_factory.mktemp("effnet") / "effnet"
    assert main(["convert", str(bundled_checkpoint()), str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def effnet(effnet_dir):
    from openhood.engine.efficientnet import load_efficientnet

    return load_efficientnet(effnet_dir)


@pytest.fixture(scope="session")
def vision_reference():
    """PyTorch logits for the committed photos (scripts/make_vision_fixtures.py)."""
    ref = np.load(FIXTURES / "vision" / "efficientnet_logits.npz", allow_pickle=False)
    paths = [FIXTURES / "vision" / "photos" / f"{name}.jpg" for name in ref["names"]]
    return paths, ref["logits"], ref["pixel_sums"]
