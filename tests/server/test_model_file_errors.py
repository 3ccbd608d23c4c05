"""Issue 31 item 4: a damaged model file given to a command that loads models is one line on
stderr naming the file and what is wrong, exit code 2 — never a traceback in a ``critical`` log
line and exit 1. Each case runs the real CLI in a subprocess (``serve`` as the real server
process would start) on a file made broken in ``tmp_path``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openhood.models import default_model_dir


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENHOOD_")}
    return subprocess.run(
        [sys.executable, "-m", "openhood.cli", *args], capture_output=True, text=True, timeout=180, env=env
    )


def _assert_one_line(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr and '"critical"' not in out.stderr, out.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def _minilm_copy(tmp_path: Path, weights: bytes) -> Path:
    """The bundled MiniLM folder (config, tokenizer, pooling) with ``weights`` as its model.safetensors."""
    folder = tmp_path / "minilm"
    shutil.copytree(default_model_dir(), folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def _truncated_gguf(tmp_path: Path) -> Path:
    from openhood.generate.bundled import default_gguf_path

    path = tmp_path / "cut.gguf"
    with open(default_gguf_path(), "rb") as f:
        path.write_bytes(f.read(3_000_000))  # the header and tensor table, a fraction of the data
    return path


@pytest.mark.parametrize("cut", [5000, 100], ids=["truncated", "header-only"])
def test_serve_refuses_damaged_safetensors_in_one_line(tmp_path, cut):
    weights = (default_model_dir() / "model.safetensors").read_bytes()[:cut]
    folder = _minilm_copy(tmp_path, weights)
    out = _cli("serve", "--port", "1", "--model", f"bad={folder}")
    _assert_one_line(out, "openhood serve: error:", str(folder / "model.safetensors"), "not a readable safetensors")


def test_serve_refuses_truncated_and_non_gguf_files_in_one_line(tmp_path):
    cut = _truncated_gguf(tmp_path)
    out = _cli("serve", "--port", "1", "--model", f"llm={cut}")
    _assert_one_line(out, "openhood serve: error:", str(cut), "not a readable GGUF file")
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model\n")
    out = _cli("serve", "--port", "1", "--model", f"llm={text}")
    _assert_one_line(out, str(text), "GGUF magic")


def test_serve_refuses_a_damaged_classifier_and_a_wrong_precision(tmp_path, digits_mlp_dir):
    folder = tmp_path / "digits"
    shutil.copytree(digits_mlp_dir, folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    out = _cli("serve", "--port", "1", "--model", f"digits={folder}")
    _assert_one_line(out, str(folder / "model.safetensors"), "not a readable safetensors")
    out = _cli("serve", "--port", "1", "--precision", "int8", "--model", f"digits={digits_mlp_dir}")
    _assert_one_line(out, "'digits'", "fp32 only")


def test_embed_and_generate_refuse_damaged_files_in_one_line(tmp_path):
    folder = _minilm_copy(tmp_path, b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    _assert_one_line(_cli("embed", "--model", str(folder), "hello"), "openhood embed: error:", "model.safetensors")
    _assert_one_line(_cli("generate", "--model", str(_truncated_gguf(tmp_path)), "hi"), "not a readable GGUF file")


def test_serve_refuses_a_config_without_sizes(tmp_path):
    folder = _minilm_copy(tmp_path, (default_model_dir() / "model.safetensors").read_bytes())
    (folder / "config.json").write_text('{"model_type": "bert"}')
    out = _cli("serve", "--port", "1", "--model", f"m={folder}")
    _assert_one_line(out, str(folder / "config.json"), "hidden_size")
