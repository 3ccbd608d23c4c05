"""The engine CLI (embed, profile-ops, export) and the profiler's accounting."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from openhood.cli import main
from openhood.engine.graph.fusion import fuse
from openhood.engine.graph.profiler import measure_gemm_peak, profile_graph, random_batch


def test_profiler_counts_gemm_flops_exactly(bert):
    b, t = 2, 8
    prof = profile_graph(fuse(bert.graph), random_batch(b, t), runs=2, threads=1)
    rows = {r["op"]: r for r in prof.rows(peak_gflops=100.0)}
    n = b * t
    # per forward: 6 x (qkv 384->1152), 6 x (up 384->1536), 12 x (384->384 out, 1536->384 down)
    assert (
        rows["Linear"]["calls"] == 6 and rows["Linear+Gelu"]["calls"] == 6 and rows["LinearAddLayerNorm"]["calls"] == 12
    )
    # Exact per-forward arithmetic of each fused kind: GEMM 2*n*in*out plus its epilogue per
    # output element (bias 1, GELU 1+27; residual + bias + LayerNorm 2+9).
    per_forward = {
        "Linear": 6 * (2 * n * 384 * 1152 + n * 1152),
        "Linear+Gelu": 6 * (2 * n * 384 * 1536 + n * 1536 * 28),
        "LinearAddLayerNorm": 6 * (2 * n * 384 * 384 + n * 384 * 11) + 6 * (2 * n * 1536 * 384 + n * 384 * 11),
    }
    for op, flops in per_forward.items():
        assert prof.flops[op] == prof.forwards * flops, op
        assert rows[op]["gflop"] == pytest.approx(flops / 1e9, rel=1e-12)
    assert abs(sum(r["pct"] for r in rows.values()) - 100.0) < 1e-6
    assert measure_gemm_peak(n=256, seconds=0.05) > 0


def test_profile_ops_cli(capsys):
    assert main(["profile-ops", "--batch", "2", "--seq", "8", "--runs", "1", "--threads", "1", "--show-graph"]) == 0
    out = capsys.readouterr().out
    assert "layer.5.ffn.up" in out and "Linear(384->1536, fp32)" in out
    assert "% peak" in out and "fusion on" in out and "fusion off" in out and "Linear+Gelu" in out
    assert "fusion on / off time" in out


def test_embed_cli_texts_and_jsonl(capsys, tmp_path):
    assert main(["embed", "Hello world", "second text"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and len(rows[0]) == 384
    assert abs(rows[0][0] - (-0.0344773)) < 1e-5
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a"}\n\n{"text": "b c d"}\n', encoding="utf-8")
    assert main(["embed", "--input", str(src), "--output", str(tmp_path / "out.npy")]) == 0
    arr = np.load(tmp_path / "out.npy", allow_pickle=False)
    assert arr.shape == (2, 384) and arr.dtype == np.float32


def test_export_cli(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["export", "--output", str(out)]) == 0
    onnx.checker.check_model(str(out))
    assert "wrote" in capsys.readouterr().out
