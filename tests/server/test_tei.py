"""The TEI-compatible routes on the real server: shapes (validated against TEI's own response
schemas, copied into tests/fixtures/tei_openapi_subset.json), numbers, errors, and the real
clients people point at TEI/OpenAI servers (huggingface_hub, LangChain)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from .conftest import API_KEY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEMA_DOC = json.loads((FIXTURES / "tei_openapi_subset.json").read_text())
LONG = " ".join(f"word{i} alpha beta" for i in range(400))  # ≫ 256 tokens


def _json_schema(node):
    """OpenAPI 3.0 → JSON Schema: ``nullable: true`` becomes type-or-null."""
    if isinstance(node, dict):
        node = {k: _json_schema(v) for k, v in node.items()}
        if node.pop("nullable", False) and "type" in node:
            node["type"] = [node["type"], "null"]
        return node
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


COMPONENTS = _json_schema(copy.deepcopy(SCHEMA_DOC["components"]))


def validate(instance, name: str) -> None:
    jsonschema.validate(instance, {"$ref": f"#/components/schemas/{name}", "components": COMPONENTS})


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.mark.parametrize(
    "method,path,body,schema",
    [
        ("POST", "/embed", {"inputs": "hello world"}, "EmbedResponse"),
        ("POST", "/embed", {"inputs": ["a", "b"], "normalize": False, "dimensions": 8}, "EmbedResponse"),
        ("POST", "/", {"inputs": ["a", "b"]}, "EmbedResponse"),
        ("POST", "/embed_all", {"inputs": ["hi there", "x"]}, "EmbedAllResponse"),
        ("POST", "/tokenize", {"inputs": ["Hello, naïve world", "東京"]}, "TokenizeResponse"),
        ("POST", "/decode", {"ids": [[101, 7592, 102], [7592]]}, "DecodeResponse"),
        (
            "POST",
            "/similarity",
            {"inputs": {"source_sentence": "a cat", "sentences": ["a dog", "stocks"]}},
            "SimilarityResponse",
        ),
        ("GET", "/info", None, "Info"),
        ("POST", "/embed", {"inputs": 3}, "ErrorResponse"),
    ],
)
def test_responses_validate_against_tei_schema(client, method, path, body, schema):
    resp = client.request(method, path, json=body)
    assert resp.headers["content-type"].startswith("application/json")
    validate(resp.json(), schema)
    with pytest.raises(jsonschema.ValidationError):  # the check can fail: a wrong shape is refused
        validate({"unexpected": resp.json()}, schema)


def test_embed_equals_v1_embeddings_and_root(client):
    texts = ["The quick brown fox.", "Привет, как дела?", "short"]
    ref = np.array([d["embedding"] for d in client.post("/v1/embeddings", json={"input": texts}).json()["data"]])
    for path in ("/embed", "/"):
        got = np.array(client.post(path, json={"inputs": texts}).json())
        np.testing.assert_allclose(got, ref, atol=1e-6)
    single = client.post("/embed", json={"inputs": texts[0]}).json()
    assert len(single) == 1 and np.allclose(single[0], ref[0], atol=1e-6)


def test_embeddings_equal_teis_published_minilm_snapshots(client):
    # TEI's candle-backend snapshots (scripts/tei_snapshots.py): raw mean pooling, float32.
    snap = json.loads((FIXTURES / "tei_minilm_snapshots.json").read_text())
    ref = np.asarray(snap["embeddings"], dtype=np.float64)  # (3, 384)
    raw = np.array(client.post("/embed", json={"inputs": snap["inputs"], "normalize": False}).json())
    cosines = np.sum(unit(raw) * unit(ref), axis=1)
    assert cosines.min() > 0.99999  # TEI's own snapshot check is > 0.999
    assert np.abs(raw - ref).max() < 2e-3  # the largest component differs by ~1e-3 (kernel differences)
    normed = np.array(client.post("/embed", json={"inputs": snap["inputs"]}).json())
    np.testing.assert_allclose(normed, unit(ref), atol=2e-4)


def test_a_client_batch_bigger_than_a_scheduler_batch_is_split_and_reassembled(server, client, embedder):
    # 64 inputs of different lengths; the scheduler's batches hold at most 32 (--max-batch-size).
    texts = [f"text number {i} " + "word " * (i % 17) for i in range(64)]
    request_id = "tei-split-0123456789abcdef"
    resp = client.post("/embed", json={"inputs": texts}, headers={"X-Request-Id": request_id})
    np.testing.assert_allclose(np.array(resp.json()), embedder.embed(texts), atol=1e-5)
    line = next(rec for rec in server.log_lines() if rec.get("request_id") == request_id)
    assert line["route"] == "/embed" and line["inputs"] == 64 and line["batches"] >= 2


def test_normalize_false_is_the_raw_mean_of_embed_all(client):
    texts = ["hello world", "a much longer sentence about embeddings"]
    raw = np.array(client.post("/embed", json={"inputs": texts, "normalize": False}).json())
    normed = np.array(client.post("/embed", json={"inputs": texts}).json())
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-2)
    np.testing.assert_allclose(unit(raw), normed, atol=1e-5)
    states = client.post("/embed_all", json={"inputs": texts}).json()
    tokens = client.post("/tokenize", json={"inputs": texts}).json()
    for i in range(2):
        assert np.asarray(states[i]).shape == (len(tokens[i]), 384)  # every token, specials included
        np.testing.assert_allclose(np.mean(states[i], axis=0), raw[i], atol=1e-5)


def test_token_states_of_a_big_request_run_in_chunks(client):
    # 40 inputs > --max-batch-size (32): two worker jobs, reassembled in order.
    texts = [f"sentence {i} " + "more " * (i % 9) for i in range(40)]
    raw = np.array(client.post("/embed", json={"inputs": texts, "normalize": False}).json())
    np.testing.assert_allclose(unit(raw), client.post("/embed", json={"inputs": texts}).json(), atol=1e-5)
    states = client.post("/embed_all", json={"inputs": texts}).json()
    assert [len(s) for s in states] == [len(t) for t in client.post("/tokenize", json={"inputs": texts}).json()]


def test_dimensions_keep_the_first_components_renormalized(client):
    full = np.array(client.post("/embed", json={"inputs": ["matryoshka"]}).json())
    short = np.array(client.post("/embed", json={"inputs": ["matryoshka"], "dimensions": 32}).json())
    assert short.shape == (1, 32)
    np.testing.assert_allclose(short, unit(full[:, :32]), atol=1e-5)
    v1 = client.post("/v1/embeddings", json={"input": "matryoshka", "dimensions": 64}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(v1, unit(full[0, :64]), atol=1e-5)
    b64 = client.post("/v1/embeddings", json={"input": "matryoshka", "dimensions": 64, "encoding_format": "base64"})
    assert b64.status_code == 200 and len(b64.json()["data"][0]["embedding"]) == 344  # 64 float32 in base64


def test_truncation_direction_and_truncate_false(client):
    # "the" is one token: of 1000 + 2, the right cut keeps 254 "the", the left cut 252 "the" + the end.
    text = "the " * 1000 + "hello world"

    def embed(body):
        return np.array(client.post("/embed", json=body).json())[0]

    np.testing.assert_allclose(embed({"inputs": text}), embed({"inputs": "the " * 254}), atol=1e-5)
    left = embed({"inputs": text, "truncation_direction": "Left"})
    np.testing.assert_allclose(left, embed({"inputs": "the " * 252 + "hello world"}), atol=1e-5)
    np.testing.assert_allclose(left, embed({"inputs": text, "truncation_direction": "left"}), atol=1e-6)
    resp = client.post("/embed", json={"inputs": ["ok", LONG], "truncate": False})
    assert resp.status_code == 413 and "input[1]" in resp.json()["error"]


def test_tokenize_offsets_and_decode_round_trip(client):
    text = "Hello, naïve world! 東京"
    tokens = client.post("/tokenize", json={"inputs": text}).json()[0]
    assert tokens[0]["special"] and tokens[-1]["special"] and tokens[0]["start"] is None
    inner = tokens[1:-1]
    assert [text[t["start"] : t["stop"]] for t in inner] == ["Hello", ",", "naïve", "world", "!", "東", "京"]
    assert [t["text"] for t in inner] == ["hello", ",", "naive", "world", "!", "東", "京"]
    bare = client.post("/tokenize", json={"inputs": text, "add_special_tokens": False}).json()[0]
    assert bare == inner
    ids = [t["id"] for t in tokens]
    assert client.post("/decode", json={"ids": ids}).json() == ["hello, naive world! 東 京"]
    assert client.post("/decode", json={"ids": ids, "skip_special_tokens": False}).json()[0].startswith("[CLS] hello")


def test_similarity_is_the_cosine_of_the_embeddings(client):
    source, sentences = "A cat sits on the mat.", ["A kitten rests on a rug.", "Stock markets fell today."]
    scores = client.post("/similarity", json={"inputs": {"source_sentence": source, "sentences": sentences}}).json()
    vecs = np.array(client.post("/embed", json={"inputs": [source, *sentences]}).json())
    np.testing.assert_allclose(scores, vecs[1:] @ vecs[0], atol=1e-5)
    assert scores[0] > scores[1]


def test_info_names_the_model_and_limits_and_no_secret(client):
    resp = client.get("/info")
    info = resp.json()
    assert info["model_id"] == "sentence-transformers/all-MiniLM-L6-v2" and info["task"] == "embed"
    assert info["max_input_length"] == 256 and info["max_client_batch_size"] == 64
    assert info["payload_limit"] == 65536 and info["backend"] and info["precision"] == "fp32"
    # the default --backend auto says which backend serves lone requests and batches, and why
    choice = info["backend_choice"]
    assert info["backend"] == choice["batch"] and {choice["lone"], choice["batch"]} <= {"numpy", "onnxruntime"}
    assert set(choice["why"]) == {"lone", "batch"}
    assert API_KEY not in resp.text


def test_tei_routes_need_the_api_key(server):
    with server.client() as anonymous:
        assert anonymous.post("/embed", json={"inputs": "x"}).status_code == 401
        assert anonymous.get("/info").status_code == 401


# ---- bad input: every new route, each failure -------------------------------------------------

ROUTE_BODIES = {  # a valid body per route, and the name of its text field
    "/embed": ({"inputs": "x"}, "inputs"),
    "/": ({"inputs": "x"}, "inputs"),
    "/embed_all": ({"inputs": "x"}, "inputs"),
    "/tokenize": ({"inputs": "x"}, "inputs"),
    "/decode": ({"ids": [7592]}, "ids"),
    "/similarity": ({"inputs": {"source_sentence": "x", "sentences": ["y"]}}, "inputs"),
}


def assert_tei_error(resp, status, *words):
    assert resp.status_code == status, resp.text
    body = resp.json()
    validate(body, "ErrorResponse")
    for word in words:
        assert word in body["error"], body


@pytest.mark.parametrize("path", list(ROUTE_BODIES))
def test_malformed_json_is_400(client, path):
    resp = client.post(path, content=b'{"inputs": ', headers={"content-type": "application/json"})
    assert_tei_error(resp, 400, "not valid JSON")


@pytest.mark.parametrize("path", list(ROUTE_BODIES))
def test_schema_error_is_422_naming_the_field(client, path):
    body, field = ROUTE_BODIES[path]
    assert_tei_error(client.post(path, json={**body, field: 3}), 422, f"'{field}'")
    assert_tei_error(client.post(path, json={}), 422, f"'{field}'")


@pytest.mark.parametrize("path", list(ROUTE_BODIES))
def test_unknown_model_is_404(client, path):
    body, _ = ROUTE_BODIES[path]
    assert_tei_error(client.post(path, json={**body, "model": "no-such-model"}), 404, "no-such-model")


@pytest.mark.parametrize("path", list(ROUTE_BODIES))
def test_over_limits_is_413(client, path):
    body, field = ROUTE_BODIES[path]
    many = {
        "/decode": {"ids": [[7592]] * 65},
        "/similarity": {"inputs": {"source_sentence": "x", "sentences": ["y"] * 65}},
    }.get(path, {field: ["x"] * 65})
    assert_tei_error(client.post(path, json=many), 413, "at most 64")
    big = {**body, "pad": "x" * 70_000}
    assert_tei_error(client.post(path, json=big), 413, "65536 bytes")


@pytest.mark.parametrize(
    "path,body,status,words",
    [
        ("/embed", {"inputs": "x", "dimensions": 385}, 400, ["dimensions"]),
        ("/embed", {"inputs": []}, 400, ["inputs"]),
        ("/embed", {"inputs": [[101, 102]]}, 400, ["token-id"]),
        ("/embed", {"inputs": "x", "truncation_direction": "middle"}, 422, ["truncation_direction"]),
        ("/embed", {"inputs": "x", "prompt_name": "query"}, 422, ["prompt_name"]),
        ("/decode", {"ids": [99_999_999]}, 422, ["99999999"]),
        ("/similarity", {"inputs": {"source_sentence": "x", "sentences": []}}, 400, ["sentences"]),
    ],
)
def test_content_errors(client, path, body, status, words):
    assert_tei_error(client.post(path, json=body), status, *words)


# ---- real clients, unchanged --------------------------------------------------------------------


def test_huggingface_hub_inference_client(server, client):
    from huggingface_hub import InferenceClient

    hf = InferenceClient(base_url=server.url, api_key=API_KEY, timeout=60)
    texts = ["hello world", "Embeddings map text to vectors."]
    ref = np.array([d["embedding"] for d in client.post("/v1/embeddings", json={"input": texts}).json()["data"]])
    one = hf.feature_extraction(texts[0])
    assert one.shape == (1, 384)
    np.testing.assert_allclose(one[0], ref[0], atol=1e-6)
    np.testing.assert_allclose(hf.feature_extraction(texts), ref, atol=1e-6)
    short = hf.feature_extraction(texts[0], dimensions=16, truncation_direction="left", truncate=True)
    np.testing.assert_allclose(short[0], unit(ref[0, :16]), atol=1e-5)


def test_langchain_openai_embeddings(server, client, embedder):
    from langchain_openai import OpenAIEmbeddings

    kw = dict(
        model=embedder.model_name,
        base_url=server.url + "/v1",
        api_key=API_KEY,
        check_embedding_ctx_length=False,
        timeout=60,
        max_retries=0,
    )
    texts = ["hello world", "Привет, как дела?", "東京は日本の首都です。"]
    docs = OpenAIEmbeddings(**kw).embed_documents(texts)
    np.testing.assert_allclose(docs, embedder.embed(texts), atol=1e-5)
    query = OpenAIEmbeddings(**kw, dimensions=64).embed_query(texts[0])
    np.testing.assert_allclose(query, unit(embedder.embed([texts[0]])[0, :64]), atol=1e-5)
    import openai

    with pytest.raises(openai.NotFoundError, match="not served"):
        OpenAIEmbeddings(**{**kw, "model": "text-embedding-3-small"}).embed_query("x")


def test_errors_reach_huggingface_hub_as_http_errors(server):
    from huggingface_hub import InferenceClient

    hf = InferenceClient(base_url=server.url, api_key=API_KEY, timeout=60)
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as info:
        hf.feature_extraction(["x"] * 65)
    assert info.value.response.status_code == 413 and "at most 64" in info.value.response.json()["error"]
