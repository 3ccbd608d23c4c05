"""``POST /v1/classify``, the ``classify`` task's route: feature vectors in, labels + probabilities out.

Request ``{"model": NAME, "input": [[…features…] | [[row], …], …], "top_k": K}`` (``model`` and
``top_k`` optional). Path: body read with the byte cap → JSON parsed (400 when it is not) →
every input checked by the model's ``FeaturePreprocessor`` in a thread (a wrong feature count,
NaN/inf, a non-number is 422 naming ``input[i]``; nothing is queued) → one (F,) vector per input
submitted to the model's batcher (length 1 each: batches form by count, so one request's vectors
share batches with other requests') → ``{"data": [{"index", "label", "probabilities"[, "top_k"]}]}``
in input order. An unknown model is 404 (``ServerState.route``).

The trade-off: a request's inputs are validated whole before any is queued, so the first bad
one fails its own request at once rather than returning partial results; other requests'
batches never see it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from openhood.models.classify import BadFeatures
from openhood.models.tasks import Task
from openhood.scheduler import length_label
from openhood.server.body import read_body
from openhood.server.errors import APIError, json_response
from openhood.server.infer import observe_stages, submit_and_wait
from openhood.server.middleware import RequestRecord
from openhood.server.openapi_classify import CLASSIFY_REQUEST, CLASSIFY_RESPONSES
from openhood.server.schemas import count_checked, load_json_object, schema_error
from openhood.server.state import ServerState

TASK = Task.CLASSIFY


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/classify", openapi_extra=CLASSIFY_REQUEST, responses=CLASSIFY_RESPONSES)
    async def classify(request: Request) -> Response:
        return await classify_request(request, state)


def _invalid(message: str, param: str | None) -> APIError:
    return APIError(422, message, code="invalid_input", param=param)


def parse(body: bytes, max_inputs: int) -> tuple[str | None, list[Any], int | None]:
    """(model, inputs, top_k) from the JSON body, with the error convention of every route
    (docs/server.md § Errors): 400 ``invalid_json`` when it is not JSON, 422 ``invalid_schema``
    for a body or field of the wrong shape, 400 ``empty_input`` for no inputs, 413
    ``too_many_inputs`` past the per-request limit."""
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:  # NaN / Infinity literals (Python's json.dumps writes them): parse, so the check names the feature
            req = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python parses
            req = load_json_object(body)  # raises the one 400 invalid_json every route gives
    if not isinstance(req, dict):
        req = load_json_object(body)  # the 422 for JSON that is not an object
    model, inputs, top_k = req.get("model"), req.get("input"), req.get("top_k")
    if model is not None and not isinstance(model, str):
        raise schema_error("'model' must be a string", "model")
    if not isinstance(inputs, list):
        raise schema_error(f"'input' must be a list of feature vectors, got {type(inputs).__name__}", "input")
    count_checked(len(inputs), max_inputs)
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise schema_error("'top_k' must be a positive integer", "top_k")
    return model, inputs, top_k


async def classify_request(request: Request, st: ServerState) -> Response:
    record: RequestRecord = request.state.record
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    requested, inputs, top_k = parse(body, config.max_inputs_per_request)
    rt = st.route(requested, TASK)
    model = rt.model
    labels = model.labels
    if top_k is not None and top_k > len(labels):
        raise schema_error(f"'top_k' must be at most {len(labels)}, the model's number of classes", "top_k")
    record.fields.update(model=model.name, inputs=len(inputs))

    t0 = time.monotonic_ns()
    try:  # checked off the event loop: 2048 inputs of 784 numbers is ~100 ms of Python
        prepared = await asyncio.to_thread(model.preprocessor.prepare, inputs)
    except BadFeatures as exc:
        raise _invalid(str(exc), f"input[{exc.index}]") from None
    t1 = time.monotonic_ns()
    results = await submit_and_wait(request, st, rt, prepared.payloads, prepared.lengths)

    t2 = time.monotonic_ns()
    probs = np.stack([r.output for r in results])  # (n, classes)
    best = probs.argmax(axis=1)
    data = []
    for i, row in enumerate(probs):
        item: dict[str, Any] = {"index": i, "label": labels[best[i]], "probabilities": row}
        if top_k is not None:
            top = np.argsort(-row, kind="stable")[:top_k]
            item["top_k"] = [{"index": int(c), "label": labels[c], "probability": float(row[c])} for c in top]
        data.append(item)
    response = json_response({"object": "list", "model": model.name, "data": data})
    t_end = time.monotonic_ns()
    observe_stages(rt, record, results, (t0, t1, t2, t_end), length_label(1), prepared.lengths)
    record.fields["check_ms"] = round((t1 - t0) / 1e6, 3)
    return response
