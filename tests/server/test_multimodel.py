"""Two models in one real server process — the bundled all-MiniLM-L6-v2 and paraphrase-MiniLM-L3-v2
imported from its bare ONNX file — listed, routed by `model` over real HTTP, each with its own
queue, buckets, readiness and metrics; 404 for a model not served."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.models import default_model_dir

from .conftest import ServerProcess

TEXTS = ["A man is eating food.", "A man is eating a meal.", "Привет, как дела?", "🙂 emoji!!", "word " * 300]


@pytest.fixture(scope="module")
def two_models(tmp_path_factory, para_dir):
    srv = ServerProcess(
        tmp_path_factory.mktemp("multi") / "server.log",
        "--model",
        f"minilm={default_model_dir()}",
        "--model",
        f"para={para_dir}",
        "--workers",
        "1",
        "--threads",
        "1",
        "--buckets",
        "32",
    )
    yield srv
    assert srv.stop() == 0


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_both_models_served_side_by_side_and_routed_by_name(two_models, para_onnx, embedder):
    from openhood.backends.onnxruntime_backend import OnnxRuntimeBackend
    from openhood.tokenizer import WordPieceTokenizer

    with two_models.client() as c:
        listed = c.get("/v1/models").json()["data"]
        assert [(m["id"], m["max_length"], m["normalized"]) for m in listed] == [
            ("minilm", 256, True),
            ("para", 128, False),
        ]
        para = c.post("/v1/embeddings", json={"input": TEXTS, "model": "para"})
        mini = c.post("/v1/embeddings", json={"input": TEXTS})  # no model: the first one
        assert para.status_code == mini.status_code == 200, (para.text, mini.text)
        assert (para.json()["model"], mini.json()["model"]) == ("para", "minilm")
        assert para.json()["truncated_inputs"] == [4] == mini.json()["truncated_inputs"]  # 128 vs 256 tokens, both cut
        assert para.json()["usage"]["prompt_tokens"] < mini.json()["usage"]["prompt_tokens"]
        missing = c.post("/v1/embeddings", json={"input": "x", "model": "all-mpnet"})
        ready = c.get("/health/ready").json()
        metrics = c.get("/metrics").text
        stats = c.get("/stats").json()
    # The served para vectors are ONNX Runtime's on the original file, not the default model's.
    got_para = np.array([d["embedding"] for d in para.json()["data"]])
    got_mini = np.array([d["embedding"] for d in mini.json()["data"]])
    tok = WordPieceTokenizer.from_pretrained(default_model_dir())
    ref = OnnxRuntimeBackend.from_file(para_onnx, threads=1)
    rows = []
    for t in TEXTS:
        ids = np.asarray(tok.encode(t, max_length=128), dtype=np.int64)[None, :]
        rows.append(ref.run({"input_ids": ids, "attention_mask": np.ones_like(ids)})["461"][0])
    assert cosines(got_para, rows).min() >= 0.9999
    assert cosines(got_mini, embedder.embed(TEXTS)).min() >= 0.9999
    assert np.allclose(np.linalg.norm(got_mini, axis=1), 1, atol=1e-4)
    assert not np.allclose(np.linalg.norm(got_para, axis=1), 1, atol=1e-2)  # para does not normalize
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert ready["status"] == "ready" and set(ready["models"]) == {"minilm", "para"}
    for name in ("minilm", "para"):
        assert f'openhood_batches_total{{model="{name}",outcome="ok"}}' in metrics
        assert f'openhood_model_memory_bytes{{model="{name}"}}' in metrics
    assert stats["models"]["minilm"]["buckets"] == [32, 256] and stats["models"]["para"]["buckets"] == [32, 128]
    starts = [e for e in two_models.log_lines() if "resident memory added" in e.get("message", "")]
    assert len(starts) == 2  # each model's memory is reported at start
    lines = [e for e in two_models.log_lines() if e.get("route") == "/v1/embeddings" and e.get("status") == 200]
    assert {e["model"] for e in lines} == {"minilm", "para"}
