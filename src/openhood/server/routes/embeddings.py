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

import asyncio
import base64
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from opentelemetry import trace
from starlette.background import BackgroundTask
from starlette.responses import Response

from openhood.models import ServedModel
from openhood.models.served import Prepared
from openhood.models.text import TextPreprocessor
from openhood.scheduler import ItemResult, length_label
from openhood.server import planted_leak
from openhood.server.body import read_body
from openhood.server.dispatch import observe_stages, submit_and_wait
from openhood.server.errors import APIError, json_response
from openhood.server.middleware import RequestRecord
from openhood.server.openapi import EMBEDDINGS_REQUEST, EMBEDDINGS_RESPONSES
from openhood.server.schemas import parse_embeddings_request
from openhood.server.state import ModelRuntime, ServerState
from openhood.server.tracing import child_span, to_epoch_ns

TASK = "embed"
PLANT_LEAK = planted_leak.enabled()  # test hook only (server/planted_leak.py), read once at import
# openhood's tokenizer runs at ~60-80 ns/char on a batch (measured; docs/server.md), so this many
# characters block the event loop for about a millisecond — cheaper inline than a thread hop.
INLINE_TOKENIZE_CHARS = 16384


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/embeddings", openapi_extra=EMBEDDINGS_REQUEST, responses=EMBEDDINGS_RESPONSES)
    async def create_embeddings(request: Request) -> Response:
        return await embeddings(request, state)


@dataclass
class Embedded:
    """One request's pooled vectors, in input order, with what its response and log need."""

    vectors: np.ndarray  # (n, dim) float32
    lengths: list[int]
    truncated: np.ndarray  # (n,) bool
    # Records metrics/spans/log fields; call once the response is built (with its build time as
    # the request's end, or now).
    finish: Callable[..., None]


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


def check_dimensions(dimensions: int, dim: int) -> None:
    """``dimensions`` keeps the first N components (Matryoshka truncation): 1..dim."""
    if not 1 <= dimensions <= dim:
        raise APIError(
            400,
            f"'dimensions' must be between 1 and this model's {dim}, got {dimensions}",
            code="invalid_dimensions",
            param="dimensions",
        )


def shorten(vectors: np.ndarray, dimensions: int, *, renormalize: bool) -> np.ndarray:
    """(n, dim) → (n, dimensions): the first components, L2-normalized again when asked (like
    OpenAI's shortened embeddings: a cut unit vector is not unit any more)."""
    cut = np.ascontiguousarray(vectors[:, :dimensions])  # orjson writes only contiguous arrays
    if not renormalize:
        return cut
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    out: np.ndarray = cut / np.maximum(norms, 1e-12)
    return out


def prepare_texts(model: ServedModel, texts: list[str], direction: str) -> Prepared:
    """Tokenize (truncating at ``direction``); ValueError → 400 naming the problem."""
    preprocessor = model.preprocessor
    try:
        if isinstance(preprocessor, TextPreprocessor):  # the one that can cut either end
            return preprocessor.prepare(texts, direction)
        return preprocessor.prepare(texts)
    except ValueError as exc:  # the tokenizer refuses text it cannot encode exactly (e.g. lone surrogates)
        raise APIError(400, f"input could not be tokenized: {exc}", code="invalid_text", param="input") from exc


async def tokenize_checked(
    request: Request, rt: ModelRuntime, texts: list[str], *, truncate: bool, direction: str = "right"
) -> tuple[Prepared, int, int]:
    """Tokenize a request's texts (inline when small, else in a thread) and refuse (413) inputs
    that were cut when the caller asked not to truncate. Returns (prepared, t_tok0, t_tok1)."""
    record: RequestRecord = request.state.record
    model = rt.model
    chars = sum(len(t) for t in texts)
    record.fields.update(model=model.name, inputs=len(texts), chars=chars)
    t_tok0 = time.monotonic_ns()
    if chars <= INLINE_TOKENIZE_CHARS:
        prepared = prepare_texts(model, texts, direction)
    else:
        prepared = await asyncio.to_thread(prepare_texts, model, texts, direction)
    t_tok1 = time.monotonic_ns()
    if PLANT_LEAK:
        planted_leak.leak(len(texts))
    lengths, truncated = prepared.lengths, prepared.truncated
    record.fields.update(
        tokens=sum(lengths), max_tokens=max(lengths), truncated=int(truncated.sum()), bucket=length_label(max(lengths))
    )
    record.fields["tokenize_ms"] = round((t_tok1 - t_tok0) / 1e6, 3)
    if truncated.any() and not truncate:
        first = int(np.flatnonzero(truncated)[0])
        raise APIError(
            413,
            f"input[{first}] is longer than the model's maximum of {model.max_length} tokens and truncation "
            "is off for this request ('truncate': false); shorten it or allow truncation",
            code="input_too_long",
            param="input",
        )
    return prepared, t_tok0, t_tok1


async def embed_texts(
    request: Request, st: ServerState, rt: ModelRuntime, texts: list[str], *, truncate: bool, direction: str = "right"
) -> Embedded:
    """Texts → pooled vectors through the model's scheduler (the request's endings — client gone,
    drain cut, failed batch, full queue — are raised by ``dispatch.submit_and_wait``)."""
    record: RequestRecord = request.state.record
    prepared, t_tok0, t_tok1 = await tokenize_checked(request, rt, texts, truncate=truncate, direction=direction)
    lengths, truncated = prepared.lengths, prepared.truncated
    results = await submit_and_wait(request, st, rt, prepared.payloads, lengths)

    t_post0 = time.monotonic_ns()
    vectors = np.stack([r.output for r in results]).astype(np.float32, copy=False)  # (n, dim)
    bucket = length_label(max(lengths))

    def done(t_end: int | None = None) -> None:
        finish(
            st,
            rt,
            record,
            results,
            lengths,
            int(truncated.sum()),
            bucket,
            (t_tok0, t_tok1, t_post0, t_end or time.monotonic_ns()),
        )

    return Embedded(vectors, lengths, truncated, done)


def finish(
    st: ServerState,
    rt: ModelRuntime,
    record: RequestRecord,
    results: list[ItemResult],
    lengths: list[int],
    truncated: int,
    bucket: str,
    times: tuple[int, int, int, int],
) -> None:
    """Stage times → log fields, metrics and spans (all from the same timestamps)."""
    t_tok0, t_tok1, t_post0, t_end = times
    _, batches = observe_stages(rt, record, results, times, bucket, lengths, truncated)
    tracer = st.tracer
    if isinstance(tracer, trace.NoOpTracer):
        return
    root = tracer.start_span(
        "embeddings.request",
        start_time=to_epoch_ns(record.start_ns),
        attributes={
            "openhood.request_id": record.request_id,
            "openhood.model": rt.model.name,
            "openhood.inputs": len(lengths),
            "openhood.tokens": sum(lengths),
            "openhood.max_tokens": max(lengths),
            "openhood.truncated": truncated,
            "openhood.length_bucket": bucket,
            "openhood.chars": record.fields.get("chars", 0),
        },
    )
    child = functools.partial(child_span, tracer, root)

    child("tokenize", t_tok0, t_tok1, **{"openhood.inputs": len(lengths), "openhood.tokens": sum(lengths)})
    for b in batches:
        batch_attrs = {
            "openhood.batch_id": b.batch_id,
            "openhood.batch_size": b.size,
            "openhood.batch_padded_len": b.padded_len,
            "openhood.batch_tokens": b.real_tokens,
            "openhood.bucket": b.bucket,
        }
        child("queue", t_tok1, b.started_ns, **batch_attrs)
        child("inference", b.inference_start_ns, b.inference_end_ns, **batch_attrs)
    child("postprocess", t_post0, t_end, **{"openhood.inputs": len(lengths)})
    root.set_attribute("http.status_code", 200)
    root.end(end_time=to_epoch_ns(t_end))
