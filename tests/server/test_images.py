"""Image classification served by a real `openhood serve` process: EfficientNet-Lite0 beside a
text model, JSON (base64 and data: URLs) and multipart uploads, embeddings, and every kind of
bad image failing only its own request."""

from __future__ import annotations

import base64
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from openhood.models import default_model_dir

from .conftest import ServerProcess

PHOTOS = Path(__file__).parents[1] / "fixtures" / "vision" / "photos"


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory, effnet_dir):
    srv = ServerProcess(
        tmp_path_factory.mktemp("vision") / "server.log",
        "--model",
        f"effnet={effnet_dir}",
        "--model",
        f"minilm={default_model_dir()}",
        "--workers",
        "1",
        "--threads",
        "2",
        "--max-body-bytes",
        str(1 << 20),
    )
    yield srv
    assert srv.stop() == 0


def b64(name: str) -> str:
    return base64.b64encode((PHOTOS / name).read_bytes()).decode()


def huge_png_header(width: int = 20000, height: int = 20000) -> bytes:
    """A PNG whose header declares width×height pixels (400 Mpx) over a few bytes of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))  # noqa: E731
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    )


def test_classify_json_and_multipart_with_labels(vision_server, effnet, vision_reference):
    with vision_server.client() as c:
        models = {m["id"]: m["task"] for m in c.get("/v1/models").json()["data"]}
        assert models == {"effnet": "image-classify", "minilm": "embed"}
        r = c.post(
            "/v1/images/classify",
            json={
                "model": "effnet",
                "top_k": 3,
                "images": [b64("chelsea.jpg"), "data:image/jpeg;base64," + b64("coffee.jpg")],
            },
        )
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        assert [d["index"] for d in data] == [0, 1] and all(len(d["labels"]) == 3 for d in data)
        assert data[0]["labels"][0]["label"] in {"Egyptian cat", "tabby", "tiger cat"}
        assert data[1]["labels"][0] == {"index": 967, "label": "espresso", "probability": pytest.approx(0.88, abs=0.02)}
        # the served probabilities are the engine's softmax of the PyTorch-checked logits
        paths, ref_logits, _ = vision_reference
        row = ref_logits[[p.name for p in paths].index("chelsea.jpg")].astype(np.float64)
        ref = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        assert data[0]["labels"][0]["probability"] == pytest.approx(ref.max(), abs=1e-4)

        files = [("images", ("flower.jpg", (PHOTOS / "flower.jpg").read_bytes(), "image/jpeg"))]
        m = c.post("/v1/images/classify", data={"model": "effnet", "top_k": "1"}, files=files)
        assert m.status_code == 200, m.text
        assert m.json()["data"][0]["labels"][0]["label"] == "daisy"
        # text still works beside it
        assert c.post("/v1/embeddings", json={"input": ["hello"], "model": "minilm"}).status_code == 200


def test_embeddings_are_the_pooled_features(vision_server, effnet):
    with vision_server.client() as c:
        r = c.post("/v1/images/embeddings", json={"images": [b64("rocket.jpg")]})
    assert r.status_code == 200, r.text
    vec = np.asarray(r.json()["data"][0]["embedding"], dtype=np.float32)
    from openhood.engine.graph.runtime import Executor

    with Executor(effnet.graph(), threads=1) as ex:
        want = ex.run({"pixel_values": effnet.pixels([(PHOTOS / "rocket.jpg").read_bytes()])})["features"][0]
    assert vec.shape == (1280,) and np.max(np.abs(vec - want)) < 1e-4


@pytest.mark.parametrize(
    "payload,status,code",
    [
        (base64.b64encode(b"this is plain text, not an image").decode(), 415, "unsupported_image"),
        (base64.b64encode((PHOTOS / "flower.jpg").read_bytes()[:2500]).decode(), 422, "corrupt_image"),
        (base64.b64encode(huge_png_header()).decode(), 413, "image_too_large"),
        ("not base64 !!", 400, "invalid_request"),
    ],
)
def test_bad_images_get_their_status(vision_server, payload, status, code):
    with vision_server.client() as c:
        r = c.post("/v1/images/classify", json={"images": [b64("china.jpg"), payload]})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert "images[1]" in r.json()["error"]["message"] or code == "invalid_request"


def test_too_many_bytes_is_413_and_bad_top_k_400(vision_server):
    with vision_server.client() as c:
        big = c.post("/v1/images/classify", json={"images": ["A" * (1 << 20)]})
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
        assert c.post("/v1/images/classify", json={"images": [b64("china.jpg")], "top_k": 0}).status_code == 400
        assert c.post("/v1/images/classify", json={"images": []}).status_code == 400


def test_errors_follow_the_convention_every_route_shares(vision_server):
    # docs/server.md § Errors: same condition, same status and code as embeddings and classify.
    with vision_server.client() as c:
        for body, status, code in (
            (b'{"images": [', 400, "invalid_json"),
            (b"[1]", 422, "invalid_schema"),
            (b'{"images": "x"}', 422, "invalid_schema"),
            (b'{"images": []}', 400, "empty_input"),
        ):
            r = c.post("/v1/images/classify", content=body, headers={"content-type": "application/json"})
            assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text


def test_a_bad_request_never_fails_concurrent_good_ones(vision_server):
    """Good and bad requests at once: every good one gets its labels (they share batches)."""
    good = {"images": [b64("motorcycle.jpg")], "top_k": 1}
    bad = {"images": [base64.b64encode((PHOTOS / "coffee.jpg").read_bytes()[:3000]).decode()]}
    statuses: list[tuple[str, int, str]] = []

    def send(kind, body):
        with vision_server.client() as c:
            r = c.post("/v1/images/classify", json=body)
            statuses.append(
                (kind, r.status_code, r.json()["data"][0]["labels"][0]["label"] if r.status_code == 200 else "")
            )

    threads = [threading.Thread(target=send, args=("good", good) if i % 2 else ("bad", bad)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(s[1] for s in statuses if s[0] == "good") == [200] * 4
    assert all(s[2] == "moped" for s in statuses if s[0] == "good")
    assert sorted(s[1] for s in statuses if s[0] == "bad") == [422] * 4


def test_a_raw_image_body_is_classified_like_the_json_one(vision_server):
    """POST the file itself (Content-Type: image/…), model and top_k in the query string: the
    same response as the same image in JSON; bytes that are no image under an image type → 415."""
    jpeg = (PHOTOS / "coffee.jpg").read_bytes()
    with vision_server.client() as c:
        as_json = c.post("/v1/images/classify", json={"images": [b64("coffee.jpg")], "top_k": 2})
        raw = c.post("/v1/images/classify?model=effnet&top_k=2", content=jpeg, headers={"Content-Type": "image/jpeg"})
        assert raw.status_code == 200, raw.text
        assert raw.json() == as_json.json() and raw.json()["data"][0]["labels"][0]["label"] == "espresso"
        emb = c.post("/v1/images/embeddings", content=jpeg, headers={"Content-Type": "image/jpeg"})
        assert emb.status_code == 200 and len(emb.json()["data"][0]["embedding"]) == 1280
        bad = c.post("/v1/images/classify", content=b"not a picture", headers={"Content-Type": "image/png"})
        assert bad.status_code == 415 and bad.json()["error"]["code"] == "unsupported_image"
        top_k = c.post("/v1/images/classify?top_k=x", content=jpeg, headers={"Content-Type": "image/jpeg"})
        assert top_k.status_code == 400 and top_k.json()["error"]["param"] == "top_k"


def test_a_multipart_body_of_many_tiny_fields_is_refused_before_parsing(vision_server):
    # Hostile pass: 20,000 one-byte fields froze every route for 18 s (the MIME parser ran on
    # the event loop). Now the parts are counted first and the parser runs off the loop.
    body = b"".join(b'--B\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i for i in range(8000))
    with vision_server.client() as c:
        t0 = time.monotonic()
        r = c.post(
            "/v1/images/classify",
            content=body + b"--B--\r\n",
            headers={"content-type": "multipart/form-data; boundary=B"},
        )
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_inputs"
        assert time.monotonic() - t0 < 10
        assert c.get("/health/live").status_code == 200
