"""``POST /v1/images/classify`` and ``POST /v1/images/embeddings``, the ``image-classify`` task's routes.

A request carries images either as JSON ``{"model", "images": [base64 | data URL, …], "top_k"}``
or as ``multipart/form-data`` (file parts, plus optional ``model`` and ``top_k`` fields). Path:
body read with the byte cap (413 before parsing) → images extracted (base64 decoded) → every
image decoded, resized and cropped **in a thread** (a 12-Mpx JPEG takes ~100 ms to decode; the
event loop keeps serving other connections meanwhile) → one uint8 crop per image submitted to
the model's batcher (length 1 each: batches form by count) → probabilities + pooled features
come back per image → top-k labels, or the feature vectors.

Bad input fails its own request only, before anything is queued: not an image → 415, corrupt or
truncated data → 422 with the decoder's reason, too many bytes → 413, too many pixels → 413
from the header alone (nothing decoded: decompression bombs), bad base64 / JSON → 400.
Multipart is parsed with the standard library's MIME parser (no python-multipart dependency);
the body is already capped, so the parser only ever sees a bounded byte string.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from email import policy
from email.parser import BytesParser
from typing import cast

import numpy as np
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from openhood.data.image import CorruptImage, ImageTooLarge, NotAnImage
from openhood.models.image_classify import ClassifyAndEmbed
from openhood.models.tasks import Task
from openhood.scheduler import length_label
from openhood.server.body import read_body
from openhood.server.errors import APIError, json_response
from openhood.server.infer import observe_stages, submit_and_wait
from openhood.server.middleware import RequestRecord
from openhood.server.state import ServerState

TASK = Task.IMAGE_CLASSIFY
DEFAULT_TOP_K = 5
# data.image error type → (HTTP status, error code)
IMAGE_ERRORS: dict[type, tuple[int, str]] = {
    NotAnImage: (415, "unsupported_image"),
    CorruptImage: (422, "corrupt_image"),
    ImageTooLarge: (413, "image_too_large"),
}


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/images/classify")
    async def classify(request: Request) -> Response:
        return await images(request, state, "classify")

    @app.post("/v1/images/embeddings")
    async def embeddings(request: Request) -> Response:
        return await images(request, state, "embeddings")


def _bad(message: str, param: str | None = "images", status: int = 400, code: str = "invalid_request") -> APIError:
    return APIError(status, message, code=code, param=param)


def _b64(index: int, value: object) -> bytes:
    if not isinstance(value, str) or not value:
        raise _bad(f"images[{index}] must be a non-empty base64 string or data: URL")
    if value.startswith("data:"):  # data:image/jpeg;base64,<payload>
        head, sep, value = value.partition(",")
        if not sep or not head.endswith(";base64"):
            raise _bad(f"images[{index}] is a data: URL without ';base64,' data")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"images[{index}] is not valid base64") from None


def _parse_json(body: bytes) -> tuple[str | None, list[bytes], object]:
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"body is not valid JSON: {exc}", param=None) from None
    if not isinstance(req, dict):
        raise _bad("body must be a JSON object with 'images'", param=None)
    raw = req.get("images")
    if not isinstance(raw, list):
        raise _bad("'images' must be a list of base64 strings")
    return req.get("model"), [_b64(i, v) for i, v in enumerate(raw)], req.get("top_k", DEFAULT_TOP_K)


def _parse_multipart(content_type: str, body: bytes) -> tuple[str | None, list[bytes], object]:
    msg = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not msg.is_multipart():
        raise _bad("multipart body without parts", param=None)
    model: str | None = None
    top_k: object = DEFAULT_TOP_K
    files: list[bytes] = []
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        raw = part.get_payload(decode=True)
        data = raw if isinstance(raw, bytes) else b""
        if part.get_filename() is not None or name in ("image", "images", "file"):
            files.append(data)
        elif name == "model":
            model = data.decode("utf-8", "replace").strip()
        elif name == "top_k":
            text = data.decode("ascii", "replace").strip()
            top_k = int(text) if text.isdigit() else text
    return model, files, top_k


async def images(request: Request, st: ServerState, kind: str) -> Response:
    record: RequestRecord = request.state.record
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        requested, blobs, top_k = _parse_multipart(content_type, body)
    else:
        requested, blobs, top_k = _parse_json(body)
    if requested is not None and not isinstance(requested, str):
        raise _bad("'model' must be a string", param="model")
    if not blobs or len(blobs) > config.max_inputs_per_request:
        raise _bad(f"send between 1 and {config.max_inputs_per_request} images, got {len(blobs)}")
    rt = st.route(requested, TASK)
    model = rt.model
    post = cast(ClassifyAndEmbed, model.postprocessor)
    if kind == "classify" and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= post.classes):
        raise _bad(f"'top_k' must be an integer from 1 to {post.classes}", param="top_k")
    record.fields.update(model=model.name, inputs=len(blobs), bytes=sum(len(b) for b in blobs), kind=kind)

    t0 = time.monotonic_ns()
    try:  # decode off the event loop; the first bad image fails this request alone
        with st.metrics.decodes_in_flight.labels(model.name).track_inprogress():
            prepared = await asyncio.to_thread(model.preprocessor.prepare, blobs)
    except ValueError as exc:
        error = getattr(exc, "error", None)
        status, code = IMAGE_ERRORS.get(type(error), (400, "invalid_image"))
        raise APIError(status, str(exc), code=code, param="images") from None
    t1 = time.monotonic_ns()

    results = await submit_and_wait(request, st, rt, prepared.payloads, prepared.lengths)

    t2 = time.monotonic_ns()
    rows = np.stack([r.output for r in results])  # (n, classes + dim)
    if kind == "classify":
        probs = rows[:, : post.classes]
        top = np.argsort(-probs, axis=1, kind="stable")[:, :top_k]  # (n, k)
        data = [
            {
                "index": i,
                "labels": [
                    {"index": int(c), "label": post.labels[c], "probability": float(probs[i, c])} for c in top[i]
                ],
            }
            for i in range(len(rows))
        ]
    else:
        data = [{"object": "embedding", "index": i, "embedding": rows[i, post.classes :]} for i in range(len(rows))]
    response = json_response({"object": "list", "model": model.name, "data": data})
    t_end = time.monotonic_ns()
    observe_stages(rt, record, results, (t0, t1, t2, t_end), length_label(1), prepared.lengths)
    record.fields["decode_ms"] = round((t1 - t0) / 1e6, 3)
    return response
