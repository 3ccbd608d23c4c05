"""The real server on the real default model: API shape, errors, auth, parity, metrics, stats, logs."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import threading
import time
import uuid

import httpx
import numpy as np
import pytest

from .conftest import API_KEY

MARKER = "zyxwvutsrqmarker"  # must never appear in logs
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors.",
    "Привет, как дела?",
    "東京は日本の首都です。",
    "short",
    " ".join(["A longer sentence that keeps going and going"] * 8),
    "naïve café résumé — ünïcödé",
    "🙂 emoji and punctuation!!! ???",
]


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def post(client, body, **kw):
    return client.post("/v1/embeddings", json=body, **kw)


def assert_error(resp, status, code=None):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code:
        assert err["code"] == code
    return err


# ---- happy path and parity -------------------------------------------------------------------


def test_float_response_shape_and_parity_with_embedder(client, embedder):
    resp = post(client, {"input": TEXTS, "model": embedder.model_name})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "list" and body["model"] == embedder.model_name
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    ref = embedder.embed(TEXTS)
    for d, r in zip(body["data"], ref, strict=True):
        assert d["object"] == "embedding" and len(d["embedding"]) == embedder.dim
        assert cosine(d["embedding"], r) >= 0.99999
    tokens = sum(len(embedder.tokenizer.encode(t, max_length=embedder.max_length)) for t in TEXTS)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert body["truncated_inputs"] == [] and resp.headers["x-openhood-truncated"] == "0"


def test_openai_sdk_unchanged(server, embedder):
    openai = pytest.importorskip("openai")
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, timeout=60.0, max_retries=0)
    out = sdk.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[:4])  # the SDK asks for base64
    ref = embedder.embed(TEXTS[:4])
    assert len(out.data) == 4 and out.usage.prompt_tokens > 0
    for d, r in zip(out.data, ref, strict=True):
        assert cosine(d.embedding, r) >= 0.99999
    single = sdk.embeddings.create(model=embedder.model_name, input="hello world", encoding_format="float")
    assert cosine(single.data[0].embedding, embedder.embed(["hello world"])[0]) >= 0.99999
    assert [m.id for m in sdk.models.list().data] == [embedder.model_name]


def test_base64_is_little_endian_float32(client, embedder):
    resp = post(client, {"input": TEXTS[:2], "encoding_format": "base64"})
    assert resp.status_code == 200
    floats = post(client, {"input": TEXTS[:2]}).json()["data"]
    for d, f in zip(resp.json()["data"], floats, strict=True):
        vec = np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
        np.testing.assert_allclose(vec, f["embedding"], atol=1e-6)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl(server, embedder):
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "60",
            server.url + "/v1/embeddings",
            "-H",
            "Content-Type: application/json",
            "-H",
            f"Authorization: Bearer {API_KEY}",
            "-d",
            json.dumps({"input": "curl says hello", "model": embedder.model_name}),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    vec = json.loads(out.stdout)["data"][0]["embedding"]
    assert cosine(vec, embedder.embed(["curl says hello"])[0]) >= 0.99999


def test_batched_equals_unbatched(server, client):
    texts = [f"sentence number {i} " + "word " * (i * 7 % 60) for i in range(24)]
    together = np.array([d["embedding"] for d in post(client, {"input": texts}).json()["data"]])
    singles = [None] * len(texts)

    def one(i):
        with server.client(headers={"Authorization": f"Bearer {API_KEY}"}) as c:
            singles[i] = post(c, {"input": texts[i]}).json()["data"][0]["embedding"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    np.testing.assert_allclose(together, np.array(singles), atol=1e-5)


def test_truncation_reported_or_413(client, embedder):
    long_text = "word " * 400
    resp = post(client, {"input": ["short one", long_text]})
    assert resp.status_code == 200
    assert resp.json()["truncated_inputs"] == [1] and resp.headers["x-openhood-truncated"] == "1"
    assert resp.json()["usage"]["prompt_tokens"] == len(embedder.tokenizer.encode("short one")) + embedder.max_length
    assert_error(post(client, {"input": ["short one", long_text], "truncate": False}), 413, "input_too_long")
    assert post(client, {"input": "short one", "truncate": False}).status_code == 200


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"input": []}, 400, "empty_input"),
        ({"input": ""}, 400, "empty_string"),
        ({"input": ["ok", ""]}, 400, "empty_string"),
        ({"input": ["ok", 3]}, 400, "invalid_input_type"),
        ({"input": ["ok", None]}, 400, "invalid_input_type"),
        ({"input": [[1, 2, 3]]}, 400, "token_ids_unsupported"),
        ({"input": ["x"] * 65}, 413, "too_many_inputs"),
        ({"input": "x", "dimensions": 385}, 400, "invalid_dimensions"),
        ({"input": "x", "dimensions": 0}, 400, "invalid_dimensions"),
        ({"input": "x", "model": "text-embedding-3-small"}, 404, "model_not_found"),
        ({"model": "all-MiniLM-L6-v2"}, 422, "invalid_schema"),
        ({"input": 42}, 422, "invalid_schema"),
        ({"input": "x", "encoding_format": "int8"}, 422, "invalid_schema"),
        ({"input": "x", "truncate": "yes"}, 422, "invalid_schema"),
    ],
)
def test_input_errors(client, body, status, code):
    err = assert_error(post(client, body), status, code)
    assert MARKER not in err["message"]


def test_malformed_json_and_non_object(client):
    assert_error(client.post("/v1/embeddings", content=b'{"input": ["a",'), 400, "invalid_json")
    assert_error(client.post("/v1/embeddings", content=b'["a"]'), 422, "invalid_schema")


def test_body_too_large_is_refused_before_parsing(client):
    big = b'{"input": "' + b"a" * 70000 + b'"}'
    assert_error(client.post("/v1/embeddings", content=big), 413, "body_too_large")

    def chunks():  # no Content-Length: the limit must hold on the streamed body too
        yield b'{"input": "'
        for _ in range(20):
            yield b"a" * 4096
        yield b'"}'

    assert_error(client.post("/v1/embeddings", content=chunks()), 413, "body_too_large")


def test_auth_on_v1_only(server):
    with server.client() as anon:
        assert_error(anon.post("/v1/embeddings", json={"input": "x"}), 401, "invalid_api_key")
        assert_error(anon.get("/v1/models"), 401, "invalid_api_key")
        wrong = anon.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401)
        assert anon.get("/health/live").status_code == 200
        assert anon.get("/health/ready").status_code == 200
        assert anon.get("/metrics").status_code == 200


def test_poisoned_request_does_not_fail_batch_mates(server):
    good = [f"good request {i}" for i in range(12)]
    results: dict[str, int] = {}

    def send(key, body):
        with server.client(headers={"Authorization": f"Bearer {API_KEY}"}) as c:
            results[key] = post(c, body).status_code

    threads = [threading.Thread(target=send, args=(t, {"input": t})) for t in good]
    threads.insert(6, threading.Thread(target=send, args=("bad", {"input": ["fine", 17]})))
    threads.insert(3, threading.Thread(target=send, args=("long", {"input": "x " * 500, "truncate": False})))
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert results.pop("bad") == 400 and results.pop("long") == 413
    assert set(results.values()) == {200} and len(results) == len(good)


# ---- observability ----------------------------------------------------------------------------


def test_request_id_is_honoured_and_logs_carry_no_text(server, client):
    rid = "test-" + uuid.uuid4().hex
    resp = post(client, {"input": [f"{MARKER} secret words", "more"]}, headers={"X-Request-ID": rid})
    assert resp.status_code == 200 and resp.headers["x-request-id"] == rid
    generated = post(client, {"input": "another"}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    bad = post(client, {"input": ["x", MARKER]}, headers={"X-Request-ID": "bad id with spaces"})
    assert bad.status_code == 200 and bad.headers["x-request-id"] != "bad id with spaces"
    assert_error(post(client, {"input": ["ok", f"{MARKER}", 5]}), 400)

    text = server.log_text()
    assert MARKER not in text and "secret" not in text
    mine = [e for e in server.log_lines() if e.get("request_id") == rid]
    assert len(mine) == 1
    line = mine[0]
    assert line["status"] == 200 and line["inputs"] == 2 and line["chars"] == len(f"{MARKER} secret words") + 4
    assert line["tokens"] > 0 and line["bucket"] == "0-32" and line["batch_sizes"]
    for key in ("total_ms", "tokenize_ms", "queue_ms", "inference_ms", "postprocess_ms"):
        assert line[key] >= 0


def test_metrics_exposition(client):
    post(client, {"input": "metrics warm-up"})  # length bucket 0-32
    post(client, {"input": ["metrics warm-up", "word " * 100]})  # 65-128 (the longest input counts)
    post(client, {"input": []})  # one 400 of our own, whatever ran before
    with httpx.Client(timeout=10) as c:
        text = c.get(client.base_url.join("/metrics")).text
    m = 'model="sentence-transformers/all-MiniLM-L6-v2"'  # every per-model series carries its model
    for needle in (
        'openhood_http_requests_total{route="/v1/embeddings",status="200"}',
        'openhood_http_requests_total{route="/v1/embeddings",status="400"}',
        f'openhood_request_stage_seconds_bucket{{le="0.001",{m},stage="tokenize"}}',
        f'openhood_request_stage_seconds_count{{{m},stage="total"}}',
        f'openhood_request_stage_seconds_count{{{m},stage="queue"}}',
        f'openhood_request_stage_seconds_count{{{m},stage="inference"}}',
        f'openhood_request_stage_seconds_count{{{m},stage="postprocess"}}',
        f'openhood_request_seconds_by_length_count{{length_bucket="0-32",{m}}}',
        f'openhood_request_seconds_by_length_count{{length_bucket="65-128",{m}}}',
        "openhood_input_tokens_bucket{le=",
        "openhood_batch_size_bucket",
        "openhood_batch_tokens_bucket",
        "openhood_batch_padding_waste_ratio_bucket",
        f"openhood_queue_depth{{{m}}} ",
        "openhood_in_flight_requests ",
        f"openhood_tokens_per_second{{{m}}} ",
        f"openhood_model_memory_bytes{{{m}}} ",
        "openhood_process_rss_bytes ",
        "process_resident_memory_bytes ",
        f'openhood_batches_total{{{m},outcome="ok"}}',
    ):
        assert needle in text, needle

    def value(name):
        return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))

    assert value("openhood_process_rss_bytes") > 10e6
    assert value(f"openhood_tokens_per_second{{{m}}}") > 0  # the warm-up request above is < 10 s old
    assert value(f"openhood_padded_tokens_total{{{m}}}") >= value(f"openhood_real_tokens_total{{{m}}}") > 0
    assert value(f"openhood_model_memory_bytes{{{m}}}") > 1e6  # its load was measured and reported
    labels = set(re.findall(r'length_bucket="([^"]+)"', text))
    assert labels <= {"0-32", "33-64", "65-128", "129-256", "257+"}
    assert MARKER not in text


def test_stats_has_p50_p99_per_length_bucket(client):
    post(client, {"input": "a short one"})
    post(client, {"input": "word " * 100})
    with httpx.Client(timeout=10) as c:
        stats = c.get(client.base_url.join("/stats")).json()
    assert stats["requests"] >= 2 and stats["buckets"][-1] == 256
    for label in ("0-32", "65-128", "all"):
        entry = stats["by_length"][label]
        assert entry["count"] >= 1
        for stage in ("total", "tokenize", "queue", "inference", "postprocess"):
            assert 0 <= entry[stage]["p50_ms"] <= entry[stage]["p99_ms"]
    assert set(stats["by_length"]) == {"0-32", "33-64", "65-128", "129-256", "257+", "all"}


def test_readiness_body(client):
    with httpx.Client(timeout=10) as c:
        resp = c.get(client.base_url.join("/health/ready"))
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "ready"
    assert body["rss_bytes"] > 0 and body["queue_depth"] >= 0 and body["in_flight"] >= 0
    assert body["probe_ms"] > 0


def test_readiness_probes_every_worker_in_turn(client):
    """The shared server runs --workers 2: successive fresh probes land on both engines."""
    seen = set()
    with httpx.Client(timeout=10) as c:
        for _ in range(4):
            time.sleep(1.1)  # past the 1 s probe reuse window: each check runs a new probe
            body = c.get(client.base_url.join("/health/ready")).json()
            assert body["status"] == "ready" and body["workers"] == 2
            seen.add(body["worker"])
    assert seen == {0, 1}
