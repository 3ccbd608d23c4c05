"""The soak's request mix: every served model's route, varied input lengths, and bad requests.

A leak often hides on a path a benchmark never takes: an error branch, an unusual length, a
client that hangs up. So the mix covers, per served model, valid requests of short to long
inputs and batch sizes, plus malformed JSON, wrong types, an unknown model, an oversized body
and (rarely) a client disconnect. Requests are drawn from a seeded generator, so two soaks send
the same sequence. The trade-off: fixed weights, not a replay of production traffic.
"""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass

import orjson

WORDS = (
    "memory leak soak tensor batch token queue server model vector cache arena thread längd mémoire память 記憶 ذاكرة"
).split()
# kind → weight; the valid kinds carry most of the load, each error kind still appears often.
MIX = {"valid": 70, "malformed": 6, "bad_type": 6, "unknown_model": 6, "oversized": 4, "empty": 4, "disconnect": 4}


@dataclass(frozen=True)
class Request:
    kind: str
    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    expect_ok: bool = False
    disconnect: bool = False  # send, then give up after a few ms: the server sees the client leave


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def tiny_png(seed: int) -> str:
    from PIL import Image

    img = Image.new("RGB", (32 + seed % 64, 32 + seed % 48), ((seed * 37) % 256, (seed * 11) % 256, 90))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


class TrafficMix:
    """``next()`` → the next ``Request``; ``models`` are /v1/models entries (id, task, max_length)."""

    def __init__(self, models: list[dict], seed: int = 0, oversized_bytes: int = 4 * 1024 * 1024):
        if not models:
            raise ValueError("the server lists no models")
        self.models = models
        self.rng = random.Random(seed)
        self.oversized = b'{"input": ["' + b"x" * oversized_bytes + b'"]}'
        self._kinds = list(MIX)
        self._weights = list(MIX.values())
        self._images = [tiny_png(i) for i in range(4)]

    def next(self) -> Request:
        kind = self.rng.choices(self._kinds, self._weights)[0]
        model = self.rng.choice(self.models)
        task = model.get("task", "embed")
        path = "/v1/images/classify" if task == "image-classify" else "/v1/embeddings"
        field = "images" if task == "image-classify" else "input"
        if kind in ("valid", "disconnect"):
            if task == "image-classify":
                items: list = [self.rng.choice(self._images) for _ in range(self.rng.choice((1, 1, 2, 4)))]
            else:
                max_words = max(2, int(model.get("max_length") or 256))
                n = self.rng.choice((1, 1, 2, 4, 8))
                items = [text(self.rng, self.rng.choice((1, 3, 8, 20, 40, 90, max_words))) for _ in range(n)]
            body = orjson.dumps({"model": model["id"], field: items})
            return Request(kind, path, body, expect_ok=kind == "valid", disconnect=kind == "disconnect")
        if kind == "malformed":
            return Request(kind, path, b'{"model": "' + model["id"].encode() + b'", "' + field.encode() + b'": [')
        if kind == "bad_type":
            return Request(kind, path, orjson.dumps({"model": model["id"], field: [1, {"a": 2}]}))
        if kind == "unknown_model":
            return Request(
                kind, path, orjson.dumps({"model": f"no-such-model-{self.rng.randrange(10**6)}", field: ["x"]})
            )
        if kind == "empty":
            return Request(kind, path, orjson.dumps({"model": model["id"], field: []}))
        return Request(kind, path, self.oversized)  # oversized: past --max-body-bytes → 413
