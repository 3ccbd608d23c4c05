"""``POST /v1/embeddings`` (OpenAI-compatible), the ``embed`` task's route.

One request, end to end (each stage timed; spans, metrics and the log line come from the same
timestamps): read the body with a byte cap (413 before parsing) → parse/validate (400/422) →
route by ``model`` (404 unknown) → tokenize with truncation (413 if the caller asked not to
truncate) → ``submit`` to that model's scheduler (429 when full) → await the futures *or* the
client's disconnect (then cancel: the worker drops the items before inference) → encode
(float list or base64) → JSON. Small requests tokenize inline; big ones in a thread, so one of
them cannot stall every other connection's I/O.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from starlette.background import BackgroundTask
from starlette.responses import Response

from openhood.models.tasks import Task
from openhood.server.body import read_body
from openhood.server.errors import json_response
from openhood.server.infer import check_dimensions, embed_texts, shorten
from openhood.server.openapi import EMBEDDINGS_REQUEST, EMBEDDINGS_RESPONSES
from openhood.server.schemas import parse_embeddings_request
from openhood.server.state import ServerState

TASK = Task.EMBED


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/embeddings", openapi_extra=EMBEDDINGS_REQUEST, responses=EMBEDDINGS_RESPONSES)
    async def create_embeddings(request: Request) -> Response:
        return await embeddings(request, state)


async def embeddings(request: Request, st: ServerState) -> Response:
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    req = parse_embeddings_request(body, max_inputs=config.max_inputs_per_request)
    rt = st.route(req.model, TASK)
    if req.dimensions is not None:
        check_dimensions(req.dimensions, rt.model.output.shape[0])
    request.state.record.fields["encoding_format"] = req.encoding_format
    truncate = config.truncate if req.truncate is None else req.truncate
    done = await embed_texts(request, st, rt, req.texts, truncate=truncate)
    vectors = done.vectors
    if req.dimensions is not None:
        vectors = shorten(vectors, req.dimensions, renormalize=True)
    if req.encoding_format == "base64":
        # OpenAI's base64 format: the little-endian float32 bytes of each vector.
        little = vectors.astype("<f4", copy=False)
        embeddings: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        embeddings = list(vectors)  # orjson writes numpy rows directly
    usage = sum(done.lengths)
    payload = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)],
        "model": rt.model.name,
        "usage": {"prompt_tokens": usage, "total_tokens": usage},
        "truncated_inputs": np.flatnonzero(done.truncated).tolist(),
    }
    response = json_response(payload, headers={"X-Openhood-Truncated": str(int(done.truncated.sum()))})
    t_built = time.monotonic_ns()  # the request's end for its stage times, whenever they are recorded

    async def report() -> None:
        # Metrics, /stats and spans once the body is on the wire (Starlette awaits a response's
        # background after sending it): ~10 histogram updates the client need not wait for. It
        # runs before this task yields, so the next request (or scrape) still sees them.
        done.finish(t_built)

    response.background = BackgroundTask(report)
    return response
