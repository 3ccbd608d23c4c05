"""A trained MLP folder → the engine graph (``engine.models.mlp.load_mlp``) → ONNX, each step held to the last.

The engine serves the folder with the input scaler folded into the first layer, so its graph must
give the trainer's probabilities on raw pixels; the ONNX export of that graph (checked by
``onnx.checker`` inside ``graph_to_onnx``) must give the engine's, in ONNX Runtime, on the same
weights; ``openhood export`` writes it, or refuses a broken folder with exit 2 and no file.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from threadpoolctl import threadpool_limits

from openhood.backends import prepare_graph
from openhood.backends.ort_session import make_session
from openhood.engine.graph.runtime import Executor
from openhood.engine.models.mlp import INPUT_NAME, fold_scaler, load_mlp
from openhood.export.onnx_export import graph_to_onnx
from openhood.train.checkpoint import CheckpointError, load_model
from openhood.train.data import load_digits_dataset


@pytest.fixture(scope="module")
def pixels():
    return load_digits_dataset().x_test.astype(np.float32)  # (360, 64) raw 0..16


def engine_probs(graph, x):
    # One BLAS thread: the hidden layer runs the panel kernel (engine.kernels.panel_gemm), not np.matmul.
    with threadpool_limits(limits=1), Executor(graph, threads=1) as ex:
        return ex.run({INPUT_NAME: x})["probs"]


def test_folded_scaler_matches_the_trainer(digits_mlp_dir, pixels):
    model, _ = load_model(digits_mlp_dir)
    mlp = load_mlp(digits_mlp_dir)
    assert mlp.n_features == 64 and mlp.labels == [str(i) for i in range(10)] and mlp.image_shape == (8, 8)
    want = model.predict_proba(pixels)
    for fused in (False, True):
        got = engine_probs(prepare_graph(mlp.graph(), fusion=fused), pixels)
        assert np.max(np.abs(got - want)) < 2e-6
    assert (got.argmax(1) == want.argmax(1)).all()


def test_fold_scaler_against_the_formula():
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((5, 3)), rng.standard_normal(3)
    mean, std = rng.uniform(0, 4, 5), rng.uniform(0.5, 2, 5)
    x = rng.uniform(0, 16, (7, 5))
    fw, fb = fold_scaler(w, b, mean, std)
    np.testing.assert_allclose(x @ fw + fb, ((x - mean) / std) @ w + b, rtol=1e-5, atol=1e-5)


def test_onnx_export_equals_the_engine(digits_mlp_dir, pixels):
    graph = prepare_graph(load_mlp(digits_mlp_dir).graph(), fusion=True)
    model = graph_to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    assert [o.type.tensor_type.shape.dim[1].dim_param for o in model.graph.output] == ["dim"]
    got = make_session(model.SerializeToString(), threads=1).run(None, {INPUT_NAME: pixels})[0]
    want = engine_probs(graph, pixels)
    assert got.shape == (360, 10) and np.max(np.abs(got - want)) <= 1e-6


def export(*args):
    return subprocess.run(
        [sys.executable, "-m", "openhood.cli", "export", *args], capture_output=True, text=True, timeout=120
    )


def test_export_command(digits_mlp_dir, tmp_path, pixels):
    out = tmp_path / "digits.onnx"
    r = export("--model", str(digits_mlp_dir), "--output", str(out))
    assert r.returncode == 0, r.stderr
    got = make_session(out.read_bytes(), threads=1).run(None, {INPUT_NAME: pixels})[0]
    assert np.max(np.abs(got - engine_probs(prepare_graph(load_mlp(digits_mlp_dir).graph()), pixels))) <= 1e-6


def test_export_refuses_a_config_that_does_not_match(digits_mlp_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in digits_mlp_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, "sizes": [64, 48, 10]}))
    with pytest.raises(CheckpointError, match=r"layers\.0\.weight"):
        load_mlp(broken)
    out = tmp_path / "broken.onnx"
    r = export("--model", str(broken), "--output", str(out))
    assert r.returncode == 2 and "layers.0.weight" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob("*.partial"))
