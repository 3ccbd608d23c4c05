"""backends/auto: both backends timed per shape, the verdict cached per machine and model, a
corrupt cache ignored with one log line and rebuilt (a real MLP model, real ORT and NumPy)."""

from __future__ import annotations

import json
import logging

import pytest

from openhood import diskcache
from openhood.backends import auto
from openhood.cachedir import ENV_VAR
from openhood.models import EngineOptions
from openhood.models.classify import load_classifier

OPTIONS = EngineOptions(backend="auto", threads=1, workers=2, batch_rows=8)


@pytest.fixture
def cache_file(tmp_path, monkeypatch, digits_mlp_dir):
    """The verdict's record file for the digits model with OPTIONS (in a test's own cache dir)."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    shapes = [auto.Shape("lone", 1, auto.LENGTH, 1), auto.Shape("batch", 8, auto.LENGTH, 1)]
    return diskcache.record_path(auto.cache_key(digits_mlp_dir, "fp32", shapes))


def _load(folder):
    model = load_classifier("digits", folder, OPTIONS)
    model.close()
    return model


def test_first_start_measures_both_backends_per_shape_and_later_starts_read_the_cache(digits_mlp_dir, cache_file):
    first = _load(digits_mlp_dir)
    choice = first.info["backend_choice"]
    assert choice["source"] == "measured at this start"
    assert set(choice["why"]) == {"lone", "batch"} and all(
        "numpy" in w and "onnxruntime" in w for w in choice["why"].values()
    )
    assert choice["shapes"] == {"lone": [1, auto.LENGTH, 1], "batch": [8, auto.LENGTH, 1]}
    assert first.info["backend"] == choice["batch"] == first.backends[0].name == first.backends[1].name
    # the lone winner serves lone requests: as the wide engine when it is not the batch winner
    assert (first.wide is None) == (choice["lone"] == choice["batch"])
    entry = json.loads(cache_file.read_text())
    assert entry["key"]["isa"] and entry["key"]["machine"]["cores"] >= 1 and entry["key"]["files"]

    again = _load(digits_mlp_dir)
    assert again.info["backend_choice"] == {**choice, "source": "cache"}


def test_a_named_backend_is_not_measured(digits_mlp_dir, cache_file):
    from dataclasses import replace

    model = load_classifier("digits", digits_mlp_dir, replace(OPTIONS, backend="numpy"))
    model.close()
    assert model.info["backend"] == "numpy" and "backend_choice" not in model.info
    assert not cache_file.exists()


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '{"entries": []}',  # valid JSON, not a record of this key
        "ENTRY",  # a valid record for this model that names no known backend
    ],
)
def test_a_corrupt_cache_is_ignored_with_one_log_line_and_rebuilt(digits_mlp_dir, cache_file, caplog, text):
    _load(digits_mlp_dir)
    if text == "ENTRY":
        record = json.loads(cache_file.read_text())
        diskcache.write(record["key"], {**record["value"], "lone": "tensorflow"})  # hash-valid
    else:
        cache_file.write_text(text)
    loggers = (auto.log.name, diskcache.log.name)
    with caplog.at_level(logging.INFO):
        model = _load(digits_mlp_dir)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name in loggers]
    assert len(warnings) == 1 and "corrupt" in warnings[0].getMessage()
    assert model.info["backend_choice"]["source"] == "measured at this start"
    entry = json.loads(cache_file.read_text())["value"]
    assert entry["lone"] in ("numpy", "onnxruntime")
