"""``POST /v1/images/classify`` and ``POST /v1/images/embeddings``, the ``image-classify`` task's routes.

A request carries images as JSON ``{"model", "images": [base64 | data URL, …], "top_k"}``, as
``multipart/form-data`` (file parts, plus optional ``model`` and ``top_k`` fields), or as one raw
image body (``Content-Type: image/…``; ``model`` and ``top_k`` in the query string). Path: body
read with the byte cap (413 before parsing) → images extracted (base64 decoded) → every image
decoded, resized and cropped by ``ImageDecoder`` (``server.image_decode``: its header's peak
bytes reserved from the server-wide ``--image-memory-mb`` budget, then a ``DecodePool`` worker
process, pixels handed back in shared memory) → one uint8 crop per image submitted to the
model's batcher (length 1 each: batches form by count) → probabilities + pooled features come
back per image → top-k labels, or the feature vectors.

Bad input fails its own request only, before anything is queued: not an image → 415, corrupt or
truncated data → 422 with the decoder's reason, too many bytes → 413, too many pixels → 413
from the header alone (nothing decoded: decompression bombs), one image needing more memory
than the whole budget → 413, bad base64 / JSON → 400. The budget spent by other requests for
``image_wait_s`` → 503 + ``Retry-After``; a decode worker killed twice on the same image → 503
(once: the image is retried on a fresh worker).
Multipart is parsed with the standard library's MIME parser (no python-multipart dependency);
the body is already capped, so the parser only ever sees a bounded byte string.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import time
from email import policy
from email.parser import BytesParser

import numpy as np
from fastapi import FastAPI, Request
from starlette.responses import Response

from openhood.data.image import CorruptImage, ImageTooLarge, NotAnImage
from openhood.models.image_classify import BadImage, ImagePreprocessor
from openhood.models.tasks import Task
from openhood.scheduler import length_label
from openhood.server.body import read_body
from openhood.server.errors import APIError, json_response
from openhood.server.image_decode import ImageDecoder
from openhood.server.infer import observe_stages, submit_and_wait
from openhood.server.middleware import RequestRecord
from openhood.server.openapi_images import IMAGE_CLASSIFY_RESPONSES, IMAGE_EMBEDDINGS_RESPONSES, IMAGES_REQUEST
from openhood.server.pixel_budget import PixelBudget
from openhood.server.schemas import count_checked, load_json_object, schema_error
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
    config = state.config
    budget = PixelBudget(config.image_memory_mb * 2**20, config.image_wait_s)
    decoders: dict[str, ImageDecoder] = {}
    for name, rt in state.single_pass.items():
        if rt.model.task == TASK:
            pre = rt.model.preprocessor
            if not isinstance(pre, ImagePreprocessor):
                raise TypeError(f"image model {name!r} has no image preprocessor")
            decoders[name] = ImageDecoder(pre, budget, workers=pre.decode_workers, queue_depth=config.max_queue)
            state.closers.append(decoders[name].close)
            state.metrics.watch_decode_pool(name, decoders[name].pool.stats, pre.decode_workers)

    @app.post("/v1/images/classify", openapi_extra=IMAGES_REQUEST, responses=IMAGE_CLASSIFY_RESPONSES)
    async def classify(request: Request) -> Response:
        return await images(request, state, decoders, "classify")

    @app.post("/v1/images/embeddings", openapi_extra=IMAGES_REQUEST, responses=IMAGE_EMBEDDINGS_RESPONSES)
    async def embeddings(request: Request) -> Response:
        return await images(request, state, decoders, "embeddings")


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
    req = load_json_object(body)  # 400 invalid_json / 422 invalid_schema, as on every route
    raw = req.get("images")
    if not isinstance(raw, list):
        raise schema_error("'images' must be a list of base64 strings", "images")
    return req.get("model"), [_b64(i, v) for i, v in enumerate(raw)], req.get("top_k", DEFAULT_TOP_K)


MULTIPART_FIELDS = 2  # the parts that are not images at most: model, top_k
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?')


def multipart_parts(content_type: str, body: bytes) -> int:
    r"""How many parts a multipart body holds, counted from its boundary lines without parsing it.

    >>> multipart_parts("multipart/form-data; boundary=B", b"--B\r\nx\r\n--B\r\ny\r\n--B--\r\n")
    2
    """
    m = _BOUNDARY.search(content_type)
    if m is None:
        raise _bad("multipart body without a boundary", param=None)
    return max(0, body.count(b"--" + m.group(1).encode("latin-1")) - 1)


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


def _parse_raw(request: Request, body: bytes) -> tuple[str | None, list[bytes], object]:
    """One image as the whole body; ``model`` and ``top_k`` from the query string."""
    query = request.query_params
    text = query.get("top_k")
    top_k: object = DEFAULT_TOP_K if text is None else (int(text) if text.isdigit() else text)
    return query.get("model"), [body], top_k


async def images(request: Request, st: ServerState, decoders: dict[str, ImageDecoder], kind: str) -> Response:
    record: RequestRecord = request.state.record
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        # The MIME parser is pure Python (20,000 one-byte fields took 18.8 s in the hostile pass, at
        # load 18): count the parts first and parse off the event loop, so such a body cannot stall
        # every other connection.
        parts = multipart_parts(content_type, body)
        if parts > config.max_inputs_per_request + MULTIPART_FIELDS:  # too many images whatever the fields
            count_checked(parts - MULTIPART_FIELDS, config.max_inputs_per_request, "images")
        requested, blobs, top_k = await asyncio.to_thread(_parse_multipart, content_type, body)
    elif content_type.startswith("image/"):
        requested, blobs, top_k = _parse_raw(request, body)
    else:
        requested, blobs, top_k = _parse_json(body)
    if requested is not None and not isinstance(requested, str):
        raise schema_error("'model' must be a string", "model")
    count_checked(len(blobs), config.max_inputs_per_request, "images")
    rt = st.route(requested, TASK)
    model = rt.model
    labels = model.labels
    classes = len(labels)  # each row: the class probabilities, then the pooled features
    if kind == "classify" and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= classes):
        raise _bad(f"'top_k' must be an integer from 1 to {classes}", param="top_k")
    record.fields.update(model=model.name, inputs=len(blobs), bytes=sum(len(b) for b in blobs), kind=kind)

    t0 = time.monotonic_ns()
    try:  # decoded in the pool's worker processes; the first bad image fails this request alone
        prepared = await decoders[model.name].prepare(blobs)
    except BadImage as exc:
        status, code = IMAGE_ERRORS.get(type(exc.error), (400, "invalid_image"))
        raise APIError(status, str(exc), code=code, param="images") from None
    t1 = time.monotonic_ns()

    results = await submit_and_wait(request, st, rt, prepared.payloads, prepared.lengths)

    t2 = time.monotonic_ns()
    rows = np.stack([r.output for r in results])  # (n, classes + dim)
    if kind == "classify":
        probs = rows[:, :classes]
        top = np.argsort(-probs, axis=1, kind="stable")[:, :top_k]  # (n, k)
        data = [
            {
                "index": i,
                "labels": [{"index": int(c), "label": labels[c], "probability": float(probs[i, c])} for c in top[i]],
            }
            for i in range(len(rows))
        ]
    else:
        data = [{"object": "embedding", "index": i, "embedding": rows[i, classes:]} for i in range(len(rows))]
    response = json_response({"object": "list", "model": model.name, "data": data})
    t_end = time.monotonic_ns()
    observe_stages(rt, record, results, (t0, t1, t2, t_end), length_label(1), prepared.lengths)
    record.fields["decode_ms"] = round((t1 - t0) / 1e6, 3)
    return response
