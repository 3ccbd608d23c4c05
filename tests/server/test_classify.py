"""``POST /v1/classify`` on a real `openhood serve` process: a trained digits MLP, served twice by name.

The served probabilities must be the trainer's on the same raw pixels; every kind of bad input
fails its own request with 422 naming the field (400 for a body that is not JSON, 404 for a
model not served), and the server keeps answering the good requests around them.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from openhood.train.checkpoint import load_model
from openhood.train.data import load_digits_dataset

from .conftest import ServerProcess


@pytest.fixture(scope="module")
def digits_server(tmp_path_factory, digits_mlp_dir):
    srv = ServerProcess(
        tmp_path_factory.mktemp("classify") / "server.log",
        "--model",
        f"digits={digits_mlp_dir}",
        "--model",
        f"digits-b={digits_mlp_dir}",
        "--workers",
        "1",
        "--threads",
        "1",
        "--max-batch-size",
        "16",
    )
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def digits():
    ds = load_digits_dataset()
    return ds.x_test[:40], ds.y_test[:40]


def test_classify_matches_the_trainer(digits_server, digits_mlp_dir, digits):
    x, _ = digits
    want = load_model(digits_mlp_dir)[0].predict_proba(x)
    with digits_server.client() as c:
        models = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        assert models["digits"]["task"] == "classify" and models["digits-b"]["task"] == "classify"
        assert models["digits"]["sizes"] == [64, 32, 10] and models["digits"]["features"] == 64
        # --backend auto (the default) timed the first and found the second, same folder, in its cache
        assert models["digits"]["backend_choice"]["source"] == "measured at this start"
        assert models["digits-b"]["backend_choice"] == {**models["digits"]["backend_choice"], "source": "cache"}
        r = c.post("/v1/classify", json={"model": "digits", "input": x.tolist(), "top_k": 3})
        assert r.status_code == 200, r.text
        data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(len(x)))
    got = np.array([d["probabilities"] for d in data])
    assert np.max(np.abs(got - want)) < 1e-5
    assert [d["label"] for d in data] == [str(k) for k in want.argmax(1)]
    assert all(d["top_k"][0]["label"] == d["label"] and len(d["top_k"]) == 3 for d in data)


def test_images_as_nested_rows_and_default_model(digits_server, digits):
    x, _ = digits
    with digits_server.client() as c:
        flat = c.post("/v1/classify", json={"input": x[:3].tolist()}).json()["data"]
        rows = c.post("/v1/classify", json={"input": x[:3].reshape(3, 8, 8).tolist()}).json()["data"]
    assert [d["probabilities"] for d in flat] == [d["probabilities"] for d in rows]
    assert "top_k" not in flat[0]


@pytest.mark.parametrize(
    ("payload", "param", "fragment"),
    [
        ({"input": [[1.0] * 63]}, "input[0]", "has 63 features, the model takes 64"),
        ({"input": [[0.0] * 64, [0.0] * 65]}, "input[1]", "65 features"),
        ({"input": "not a list"}, "input", "'input' must be a list"),
        ({"input": [[0.0] * 63 + ["7"]]}, "input[0]", "str, not a number"),
        ({"input": [[0.0] * 63 + [True]]}, "input[0]", "bool, not a number"),
        ({"input": [[0.0] * 63 + [1e39]]}, "input[0]", "finite float32"),
        ({"input": [[[0.0] * 8] * 7]}, "input[0]", "8 rows of 8 numbers"),
        ({"input": [[0.0] * 64], "top_k": 11}, "top_k", "at most 10"),
        ({"input": [[0.0] * 64], "top_k": 0}, "top_k", "positive integer"),
    ],
)
def test_bad_input_is_422_naming_the_field(digits_server, payload, param, fragment):
    with digits_server.client() as c:
        r = c.post("/v1/classify", json={"model": "digits", **payload})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["param"] == param and fragment in err["message"]


def test_errors_follow_the_convention_every_route_shares(digits_server):
    # docs/server.md § Errors: the same condition gets the same status and code on every route.
    with digits_server.client() as c:
        cases = [
            (b'{"input": [[1, 2', 400, "invalid_json", None),
            (b"[1, 2]", 422, "invalid_schema", None),
            (json.dumps({"input": []}).encode(), 400, "empty_input", "input"),
            (json.dumps({"input": [[0.0] * 64] * 2049}).encode(), 413, "too_many_inputs", "input"),
            (json.dumps({"input": "x"}).encode(), 422, "invalid_schema", "input"),
            (json.dumps({"model": 3, "input": [[0.0] * 64]}).encode(), 422, "invalid_schema", "model"),
            (b"[" * 5000 + b"]" * 5000, 400, "invalid_json", None),  # deeper than Python's parser goes
        ]
        for body, status, code, param in cases:
            r = c.post("/v1/classify", content=body, headers={"content-type": "application/json"})
            assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["param"]) == (status, code, param)


def test_nan_and_infinity_literals_are_422(digits_server):
    for bad in ("NaN", "Infinity", "-Infinity"):
        body = '{"input": [[' + ", ".join(["0"] * 10 + [bad] + ["0"] * 53) + "]]}"
        with digits_server.client() as c:
            r = c.post("/v1/classify", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["param"] == "input[0]" and "[10]" in r.json()["error"]["message"]
    assert json.dumps(float("nan")) == "NaN"  # what Python clients send


def test_malformed_json_unknown_model_and_no_embeddings_route(digits_server):
    with digits_server.client() as c:
        r = c.post("/v1/classify", content=b'{"input": [[1, 2', headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = c.post("/v1/classify", json={"model": "nope", "input": [[0.0] * 64]})
        assert r.status_code == 404 and r.json()["error"]["param"] == "model"
        r = c.post("/v1/embeddings", json={"model": "digits", "input": "hello"})
        assert r.status_code == 404  # no embed model served: the route is not even registered


def test_bad_requests_do_not_fail_concurrent_good_ones(digits_server, digits):
    x, _ = digits
    statuses: list[int] = []

    def good():
        with digits_server.client() as c:
            for _ in range(5):
                statuses.append(c.post("/v1/classify", json={"input": x[:4].tolist()}).status_code)

    def bad():
        with digits_server.client() as c:
            for _ in range(5):
                statuses.append(c.post("/v1/classify", json={"input": [[0.0] * 64, [1.0] * 3]}).status_code)

    threads = [threading.Thread(target=f) for f in (good, bad, good, bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] * 10 + [422] * 10
