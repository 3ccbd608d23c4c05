"""The model registry and the served-model unit: specs, folders, readiness per model."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from openhood import models
from openhood.formats.weights import UnsafeModelFormatError, weights_file


def test_default_model_is_bundled():
    folder = models.default_model_dir()
    assert (folder / "config.json").is_file()
    assert weights_file(folder).name == "model.safetensors"
    assert models.model_name_for(folder) == models.DEFAULT_MODEL_NAME


def test_missing_folder_is_clear(tmp_path: Path):
    with pytest.raises(models.ModelNotFoundError, match="does not exist"):
        models.resolve_model_dir(tmp_path / "nope")


def test_pickle_weights_are_refused(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(UnsafeModelFormatError, match="pickle"):
        weights_file(models.resolve_model_dir(tmp_path))


def test_model_specs_from_flags_and_toml(tmp_path: Path):
    assert models.parse_model_spec("a=/x/y") == models.ModelSpec(name="a", path="/x/y")
    assert models.parse_model_spec("/x/y").name is None
    assert models.parse_model_spec("d=") == models.ModelSpec(name="d")  # the bundled default, named d
    with pytest.raises(models.ModelSpecError, match="NAME=PATH"):
        models.parse_model_spec("=/x")
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[server]\nport = 9001\n\n[[models]]\nname = "minilm"\n\n'
        '[[models]]\nname = "para"\npath = "/m/para"\nbackend = "onnxruntime"\nbuckets = [32, 128]\n'
    )
    server, specs = models.read_model_file(toml)
    assert server == {"port": 9001}
    assert specs[0] == models.ModelSpec(name="minilm")
    assert (specs[1].name, specs[1].path, specs[1].backend, specs[1].buckets) == (
        "para",
        "/m/para",
        "onnxruntime",
        (32, 128),
    )
    toml.write_text("[server]\n")
    with pytest.raises(models.ModelSpecError, match=r"\[\[models\]\]"):
        models.read_model_file(toml)


def test_unknown_task_and_duplicate_names_are_refused():
    with pytest.raises(models.ModelSpecError, match="unknown task"):
        models.load_model(models.ModelSpec(task="telepathy"), models.EngineOptions())
    with pytest.raises(models.ModelSpecError, match="named"):
        models.load_models([models.ModelSpec(name="x"), models.ModelSpec(name="x")], models.EngineOptions())


def test_readiness_expects_unit_norm_only_from_a_normalizing_model(tmp_path: Path):
    """A folder without a Normalize module: unnormalized output, and the probe still passes."""
    src = models.default_model_dir()
    plain = tmp_path / "no-normalize"
    shutil.copytree(src, plain, symlinks=True)
    modules = (plain / "modules.json").read_text()
    assert "Normalize" in modules
    (plain / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},'
        ' {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]'
    )
    model = models.load_model(models.ModelSpec(path=str(plain)), models.EngineOptions())
    try:
        assert model.name == "no-normalize" and not model.output.unit_norm and not model.info["normalized"]
        assert model.probe(0)["worker"] == 0  # healthy although its output is not unit norm
        prepared = model.preprocessor.prepare(["hello there"])
        row = model.run(0, prepared.payloads, prepared.lengths[0])[0]
        assert abs(float(np.linalg.norm(row)) - 1.0) > 1e-2
        with pytest.raises(RuntimeError, match="norm"):
            models.OutputSpec(row.shape, unit_norm=True).check(row)  # what the old probe wrongly demanded
    finally:
        model.close()
