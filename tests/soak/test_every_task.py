"""Issue 31 item 7: ``openhood soak`` drives every task a server serves. A soak of a ``classify``
model (the digits MLP) and a ``generate`` model (the bundled SmolLM2 GGUF) in one real server
process: every valid request gets 200 on its own task's route (before, each went to
``/v1/embeddings`` and got 404), and a task the soak cannot drive is refused before any request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from openhood.soak.traffic import ROUTES, TrafficMix


@pytest.mark.timeout(420)
def test_soak_drives_classify_and_generate_models(tmp_path, digits_mlp_dir, smollm2_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENHOOD_")}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "openhood.cli", "soak", "--out", str(tmp_path)),
            *("--model", f"digits={digits_mlp_dir}", "--model", f"llm={smollm2_path}"),
            *("--requests", "40", "--concurrency", "2", "--sample-every", "1", "--seed", "1"),
            *("--serve-args", "--workers 1 --threads 1"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1 would be a memory verdict, not a usage error
    doc = json.loads((tmp_path / "soak.json").read_text())
    outcomes = doc["outcomes"]
    assert doc["unexpected"] == 0, outcomes
    assert outcomes.get("valid 200", 0) >= 20, outcomes
    assert set(doc["models"]) == {"digits", "llm"}
    log = (tmp_path / "server.log").read_text()
    routes = {json.loads(line).get("route") for line in log.splitlines() if '"event":"request"' in line}
    assert {"/v1/classify", "/v1/chat/completions", "/v1/completions"} <= routes, routes
    assert "/v1/embeddings" not in routes


def test_mix_sends_each_task_to_its_route_and_refuses_an_unknown_task():
    models = [
        {"id": "d", "task": "classify", "features": 64, "image_shape": [8, 8]},
        {"id": "g", "task": "generate", "max_length": 8192},
    ]
    mix = TrafficMix(models, seed=2)
    valid = [r for r in (mix.next() for _ in range(300)) if r.kind == "valid"]
    assert {r.path for r in valid} == {"/v1/classify", "/v1/chat/completions", "/v1/completions"}
    for r in valid:
        body = json.loads(r.body)
        if r.path == "/v1/classify":
            flat = [[v for row in x for v in row] if isinstance(x[0], list) else x for x in body["input"]]
            assert all(len(x) == 64 for x in flat)
        else:
            assert 1 <= body["max_tokens"] <= 8 and ("messages" in body or "prompt" in body)
    with pytest.raises(ValueError, match=r"cannot drive model 'r'.*'rerank'"):
        TrafficMix([*models, {"id": "r", "task": "rerank"}])
    assert set(ROUTES) == {"embed", "image-classify", "classify", "generate"}
