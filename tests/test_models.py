from pathlib import Path

import pytest

from openhood import models


def test_default_model_is_bundled():
    folder = models.default_model_dir()
    assert (folder / "config.json").is_file()
    assert models.weights_file(folder).name == "model.safetensors"


def test_missing_folder_is_clear(tmp_path: Path):
    with pytest.raises(models.ModelNotFoundError, match="does not exist"):
        models.resolve_model_dir(tmp_path / "nope")


def test_pickle_weights_are_refused(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(models.UnsafeModelFormatError, match="pickle"):
        models.weights_file(models.resolve_model_dir(tmp_path))
