"""Model folders: round trip, refusal of configs that do not match their weights, staged writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from openhood.train.checkpoint import CheckpointError, load_model, model_config, save_model, staged_folder
from openhood.train.model import MLP


def saved(tmp_path, sizes=(6, 5, 3)):
    model = MLP(sizes, seed=2)
    model.fit_scaler(np.random.default_rng(0).uniform(0, 16, (30, sizes[0])))
    folder = tmp_path / "m"
    folder.mkdir()
    save_model(model, model_config(model, labels=[str(i) for i in range(sizes[-1])], image_shape=None), folder)
    return model, folder


def test_round_trip(tmp_path):
    model, folder = saved(tmp_path)
    loaded, cfg = load_model(folder)
    assert cfg["sizes"] == [6, 5, 3] and loaded.sizes == model.sizes
    np.testing.assert_array_equal(loaded.params, model.params)
    x = np.random.default_rng(1).uniform(0, 16, (4, 6))
    np.testing.assert_array_equal(loaded.predict_proba(x), model.predict_proba(x))
    assert not any(p.suffix in (".pkl", ".pt", ".bin") for p in folder.iterdir())


def test_config_that_does_not_match_weights(tmp_path):
    _, folder = saved(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "sizes": [6, 7, 3]}))
    with pytest.raises(CheckpointError, match=r"layers.0.weight has shape \(6, 5\)"):
        load_model(folder)
    (folder / "config.json").write_text(json.dumps({**cfg, "sizes": [6, 5, 4, 3], "labels": list("abc")}))
    with pytest.raises(CheckpointError, match="missing"):
        load_model(folder)
    (folder / "config.json").write_text(json.dumps({**cfg, "labels": ["a"]}))
    with pytest.raises(CheckpointError, match="labels"):
        load_model(folder)
    (folder / "config.json").write_text(json.dumps(cfg))
    t = load_file(str(folder / "model.safetensors"))
    t["layers.1.bias"][0] = np.nan
    save_file(t, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="NaN"):
        load_model(folder)
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="safetensors"):
        load_model(folder)


def test_staged_folder_leaves_nothing_on_error(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), staged_folder(out) as tmp:
        (tmp / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with staged_folder(out) as tmp:
        (tmp / "a").write_text("1")
    with staged_folder(out) as tmp:  # replacing an existing folder
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b"] and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
