"""The soak's request mix: every served model's route, varied input lengths, and bad requests.

A leak often hides on a path a benchmark never takes: an error branch, an unusual length, a
client that hangs up. So the mix covers, per served model, valid requests of short to long
inputs and batch sizes, plus malformed JSON, wrong types, an unknown model, an oversized body
and (rarely) a client disconnect. Requests are drawn from a seeded generator, so two soaks send
the same sequence. The trade-off: fixed weights, not a replay of production traffic.

Each task of ``/v1/models`` has its route and its valid inputs (``ROUTES``): texts for
``embed``, small PNGs for ``image-classify``, feature vectors (flat, or rows for a model trained
on images) of the size the model lists for ``classify``, and for ``generate`` the loadtest's own
chat workload (``loadtest.chat``: a drawn prompt, a few ``max_tokens``), streamed or not, on
``/v1/chat/completions`` or ``/v1/completions``. A task missing from ``ROUTES`` is refused when
the mix is built, before any request: a soak that cannot drive a model must not report on it.
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


ROUTES = {  # task → (path of its valid requests, the body field holding the inputs)
    "embed": ("/v1/embeddings", "input"),
    "image-classify": ("/v1/images/classify", "images"),
    "classify": ("/v1/classify", "input"),
    "generate": ("/v1/chat/completions", "messages"),
}
COMPLETIONS_PATH = "/v1/completions"  # generate's other route: a "prompt", no chat template
GENERATE_PROMPT_WORDS = "1-40"  # loadtest length distributions: short prompts, a few tokens out,
GENERATE_MAX_TOKENS = "1-8"  # so generation takes its share of the mix, not all of its time


class TrafficMix:
    """``next()`` → the next ``Request``; ``models`` are /v1/models entries (id, task, max_length)."""

    def __init__(self, models: list[dict], seed: int = 0, oversized_bytes: int = 4 * 1024 * 1024):
        if not models:
            raise ValueError("the server lists no models")
        for m in models:
            if m.get("task", "embed") not in ROUTES:
                raise ValueError(
                    f"soak cannot drive model {m['id']!r}: its task {m.get('task')!r} is not one it sends "
                    f"traffic for ({', '.join(ROUTES)})"
                )
        self.models = models
        self.rng = random.Random(seed)
        self.oversized = b'{"input": ["' + b"x" * oversized_bytes + b'"]}'
        self._kinds = list(MIX)
        self._weights = list(MIX.values())
        self._images = [tiny_png(i) for i in range(4)]
        self._chat = self._chat_workload(seed) if any(m.get("task") == "generate" for m in models) else None

    @staticmethod
    def _chat_workload(seed: int):
        from openhood.loadtest.chat_workload import ChatWorkload, LengthDist

        return ChatWorkload(LengthDist.parse(GENERATE_PROMPT_WORDS), LengthDist.parse(GENERATE_MAX_TOKENS), seed)

    def next(self) -> Request:
        kind = self.rng.choices(self._kinds, self._weights)[0]
        model = self.rng.choice(self.models)
        task = model.get("task", "embed")
        path, field = ROUTES[task]
        if kind in ("valid", "disconnect"):
            if task == "generate":
                path, body = self._generate(model)
            else:
                body = orjson.dumps({"model": model["id"], field: self._inputs(task, model)})
            return Request(kind, path, body, expect_ok=kind == "valid", disconnect=kind == "disconnect")
        if kind == "malformed":
            return Request(kind, path, b'{"model": "' + model["id"].encode() + b'", "' + field.encode() + b'": [')
        if kind == "bad_type":
            return Request(kind, path, orjson.dumps({"model": model["id"], field: [1, {"a": 2}]}))
        if kind == "unknown_model":  # an input the route accepts, so the 404 comes from routing
            item = {"role": "user", "content": "x"} if task == "generate" else "x"
            return Request(
                kind, path, orjson.dumps({"model": f"no-such-model-{self.rng.randrange(10**6)}", field: [item]})
            )
        if kind == "empty":
            return Request(kind, path, orjson.dumps({"model": model["id"], field: []}))
        return Request(kind, path, self.oversized)  # oversized: past --max-body-bytes → 413

    def _inputs(self, task: str, model: dict) -> list:
        """1–8 valid inputs of ``task`` for ``model`` (its /v1/models entry)."""
        rng = self.rng
        if task == "image-classify":
            return [rng.choice(self._images) for _ in range(rng.choice((1, 1, 2, 4)))]
        n = rng.choice((1, 1, 2, 4, 8))
        if task == "classify":
            features, shape = int(model["features"]), model.get("image_shape")
            rows = [[round(rng.uniform(0, 16), 2) for _ in range(features)] for _ in range(n)]
            if shape and rng.random() < 0.5:  # the same vectors as image rows, (H, W) nested lists
                return [[r[i : i + shape[1]] for i in range(0, features, shape[1])] for r in rows]
            return rows
        max_words = max(2, int(model.get("max_length") or 256))
        return [text(rng, rng.choice((1, 3, 8, 20, 40, 90, max_words))) for _ in range(n)]

    def _generate(self, model: dict) -> tuple[str, bytes]:
        """A chat or completions request from the loadtest's chat workload, streamed or not."""
        from openhood.loadtest.chat import ChatConfig, request_body

        assert self._chat is not None
        path = ROUTES["generate"][0] if self.rng.random() < 0.7 else COMPLETIONS_PATH
        cfg = ChatConfig(url=path, levels=(1,), model=model["id"], temperature=self.rng.choice((0.0, 0.7)))
        item = self._chat.draw()
        return path, request_body(item, cfg, seed=self.rng.randrange(2**31), stream=self.rng.random() < 0.5)
