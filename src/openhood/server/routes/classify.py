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
from typing import Any, cast

import numpy as np
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

from openhood.models.classify import BadFeatures, Probabilities
from openhood.scheduler import BatchFailedError, ItemResult, length_label
from openhood.server.body import read_body, wait_disconnect
from openhood.server.completion import gather_items
from openhood.server.errors import APIError, ClientGone, admission, drain_deadline, json_response
from openhood.server.middleware import RequestRecord
from openhood.server.state import ModelRuntime, ServerState

TASK = "classify"


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/classify")
    async def classify(request: Request) -> Response:
        return await classify_request(request, state)


def _invalid(message: str, param: str | None, status: int = 422) -> APIError:
    return APIError(status, message, code="invalid_request" if status == 400 else "invalid_input", param=param)


def parse(body: bytes, max_inputs: int) -> tuple[str | None, list[Any], int | None]:
    """(model, inputs, top_k) from the JSON body; 400 when it is not JSON, 422 for a bad field."""
    try:
        req = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        try:  # NaN / Infinity literals (Python's json.dumps writes them): parse, so the check names the feature
            req = json.loads(body)
        except ValueError:
            raise _invalid(f"body is not valid JSON: {exc}", None, 400) from None
    if not isinstance(req, dict):
        raise _invalid("body must be a JSON object with 'input'", None, 400)
    model, inputs, top_k = req.get("model"), req.get("input"), req.get("top_k")
    if model is not None and not isinstance(model, str):
        raise _invalid("'model' must be a string", "model")
    if not isinstance(inputs, list) or not 1 <= len(inputs) <= max_inputs:
        got = f"{len(inputs)} inputs" if isinstance(inputs, list) else type(inputs).__name__
        raise _invalid(f"'input' must be a list of 1 to {max_inputs} feature vectors, got {got}", "input")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise _invalid("'top_k' must be a positive integer", "top_k")
    return model, inputs, top_k


async def submit_and_wait(
    request: Request, st: ServerState, rt: ModelRuntime, payloads: list[Any], lengths: list[int]
) -> list[ItemResult]:
    """Queue the items on the model's batcher and wait for them, or for the client to leave / the drain cut."""
    with admission(rt.metrics):
        futures = rt.batcher.submit(payloads, lengths)
    results_task = gather_items(futures)
    results_task.add_done_callback(lambda t: t.cancelled() or t.exception())  # never "exception was never retrieved"
    disconnect_task = asyncio.ensure_future(wait_disconnect(request.receive))
    cut_task = asyncio.ensure_future(st.lifecycle.cut.wait())
    try:
        pending: set[asyncio.Future[Any]] = {results_task, disconnect_task, cut_task}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect_task.cancel()
        cut_task.cancel()
        client_gone = not results_task.done()
        if client_gone:
            results_task.cancel()  # the worker skips items it has not started
    if client_gone:
        if st.lifecycle.cut.is_set():
            st.metrics.drain_cut.inc()
            raise drain_deadline()
        raise ClientGone()
    try:
        return results_task.result()
    except BatchFailedError as exc:
        for f in futures:
            f.cancel()
        raise APIError(
            500,
            f"{exc}; the server keeps serving, retry the request",
            type="server_error",
            code="inference_failed",
            param=None,
        ) from exc


async def classify_request(request: Request, st: ServerState) -> Response:
    record: RequestRecord = request.state.record
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    requested, inputs, top_k = parse(body, config.max_inputs_per_request)
    rt = st.route(requested, TASK)
    model = rt.model
    post = cast(Probabilities, model.postprocessor)
    if top_k is not None and top_k > post.classes:
        raise _invalid(f"'top_k' must be at most {post.classes}, the model's number of classes", "top_k")
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
        item: dict[str, Any] = {"index": i, "label": post.labels[best[i]], "probabilities": row}
        if top_k is not None:
            top = np.argsort(-row, kind="stable")[:top_k]
            item["top_k"] = [{"index": int(c), "label": post.labels[c], "probability": float(row[c])} for c in top]
        data.append(item)
    response = json_response({"object": "list", "model": model.name, "data": data})
    t_end = time.monotonic_ns()
    last = max((r.batch for r in results), key=lambda b: b.inference_end_ns)
    stages = {
        "total": (t_end - record.start_ns) / 1e9,
        "tokenize": (t1 - t0) / 1e9,  # "tokenize" = input checks here
        "queue": (last.started_ns - t1) / 1e9,
        "inference": (last.inference_end_ns - last.inference_start_ns) / 1e9,
        "postprocess": (t_end - t2) / 1e9,
    }
    rt.metrics.observe_request(stages, length_label(1), prepared.lengths, 0)
    record.fields.update(
        check_ms=round((t1 - t0) / 1e6, 3),
        queue_ms=round(stages["queue"] * 1e3, 3),
        inference_ms=round(stages["inference"] * 1e3, 3),
        batch_sizes=sorted({r.batch.size for r in results}),
    )
    return response
