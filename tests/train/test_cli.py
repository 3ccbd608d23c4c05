"""``openhood train`` as a real subprocess: the model folder it writes, and exit 2 on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from openhood.train.checkpoint import load_model


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "openhood.cli", "train", *args], capture_output=True, text=True, timeout=120
    )


def test_train_writes_folder(tmp_path):
    out = tmp_path / "digits"
    r = run("--dataset", "digits", "--out", str(out), "--epochs", "3", "--hidden", "32")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("epoch ") == 3 and "loss" in r.stderr and "acc" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "confusion.json",
        "model.safetensors",
        "summary.json",
        "training.svg",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 3 and summary["train_seconds"] > 0 and 0.3 < summary["test_accuracy"] <= 1
    assert np.sum(json.loads((out / "confusion.json").read_text())["matrix"]) == 360
    _model, cfg = load_model(out)
    assert cfg["sizes"] == [64, 32, 10] and "<svg" in (out / "training.svg").read_text()


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "nan.csv"
    bad.write_text("1,2,0\nnan,1,1\n3,4,0\n5,6,1\n4,4,1\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for data in (bad, empty, tmp_path / "missing.npz"):
        out = tmp_path / "out"
        r = run("--data", str(data), "--out", str(out))
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
        assert not out.exists()
    for smoothing in ("1.0", "-0.1"):
        out = tmp_path / "out"
        r = run("--dataset", "digits", "--out", str(out), "--label-smoothing", smoothing)
        assert r.returncode == 2 and "--label-smoothing" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.csv", "nan.csv"]  # no staged leftovers
