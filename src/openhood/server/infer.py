"""The transport-free core of a request: prepare, submit, wait or cancel, and account for stages.

Every route family (OpenAI embeddings, the TEI routes, images, classify) calls it between its own
parsing and its own response shape, as TEI's ``Infer`` does, so none carries a copy. For a
model's batcher: admission (429 full / 503 draining / 413 more than the queue may hold), one hop
from the worker threads back to the loop, and a wait that ends on the first of three things —
the results, the client leaving (499: its unstarted items are cancelled), or the drain deadline
(503 ``drain_deadline``). A failed item fails only this request (500). Then the request's stage
times come from its slowest batch (it waits for that one). For text: tokenizing (inline when
small, else in a thread), the 413 for an input cut while truncation is off, and the pooled
vectors with their metrics, log fields and spans. Kept in one place so a route cannot forget
one of the endings. The trade-off: results arrive all at once, not per item.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from opentelemetry import trace
from starlette.requests import Request

from openhood.models import ServedModel
from openhood.models.served import Prepared
from openhood.models.text import TextPreprocessor
from openhood.scheduler import BatchFailedError, BatchInfo, ItemResult, length_label
from openhood.server.body import wait_disconnect
from openhood.server.completion import gather_items
from openhood.server.errors import APIError, ClientGone, admission, drain_deadline
from openhood.server.middleware import RequestRecord
from openhood.server.state import ModelRuntime, ServerState
from openhood.server.tracing import child_span, to_epoch_ns

log = logging.getLogger("openhood.server")


async def submit_and_wait(
    request: Request, st: ServerState, rt: ModelRuntime, payloads: Sequence[Any], lengths: Sequence[int]
) -> list[ItemResult]:
    """Queue the items on ``rt``'s batcher and return their results in order, or raise the
    request's ending: ``APIError`` 429/503/500, ``drain_deadline()`` or ``ClientGone``."""
    with admission(rt.metrics):
        futures = rt.scheduler.submit(list(payloads), list(lengths))
    results_task = gather_items(futures)  # one hop from the worker threads to the loop per request
    # Read the outcome even when nobody awaits it any more (client gone, drain cut): an
    # unretrieved exception would otherwise surface as asyncio's "exception was never retrieved".
    results_task.add_done_callback(lambda t: t.cancelled() or t.exception())
    disconnect_task = asyncio.ensure_future(wait_disconnect(request.receive))
    try:
        # cut_waiter: one future shared by every waiting request (the drain's grace period ran out)
        pending: set[asyncio.Future[Any]] = {results_task, disconnect_task, st.lifecycle.cut_waiter()}
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler itself is cancelled
        disconnect_task.cancel()
        client_gone = not results_task.done()
        if client_gone:
            results_task.cancel()  # the worker skips items it has not started
    if client_gone and st.lifecycle.cut.is_set():
        st.metrics.drain_cut.inc()
        log.warning(
            "request cut at the drain deadline",
            extra={"fields": {"event": "drain_cut", "message": "request cut at the drain deadline"}},
        )
        raise drain_deadline()
    if client_gone:
        raise ClientGone()
    try:
        return results_task.result()
    except BatchFailedError as exc:
        for f in futures:  # items of this request still queued in other batches are moot now
            f.cancel()
        raise APIError(
            500,
            f"{exc}; the server keeps serving, retry the request",
            type="server_error",
            code="inference_failed",
            param=None,
        ) from exc


def observe_stages(
    rt: ModelRuntime,
    record: RequestRecord,
    results: list[ItemResult],
    times: tuple[int, int, int, int],
    bucket: str,
    lengths: Sequence[int],
    truncated: int = 0,
) -> tuple[dict[str, float], list[BatchInfo]]:
    """``times`` = (prepare start, prepare end, postprocess start, end) in monotonic ns → the
    request's stages in seconds, observed on the model's metrics and written to its log line;
    returns them with the request's distinct batches. "tokenize" is the preparation stage
    (tokenizing, image decoding or feature checks)."""
    t_prep0, t_prep1, t_post0, t_end = times
    batches = list({r.batch.batch_id: r.batch for r in results}.values())
    last = max(batches, key=lambda b: b.inference_end_ns)  # the request waits for its slowest batch
    stages = {
        "total": (t_end - record.start_ns) / 1e9,
        "tokenize": (t_prep1 - t_prep0) / 1e9,
        "queue": (last.started_ns - t_prep1) / 1e9,
        "inference": (last.inference_end_ns - last.inference_start_ns - last.preempted_ns) / 1e9,
        "preempted": last.preempted_ns / 1e9,
        "postprocess": (t_end - t_post0) / 1e9,
    }
    rt.metrics.observe_request(stages, bucket, list(lengths), truncated)
    record.fields.update(
        batches=len(batches),
        batch_sizes=sorted(b.size for b in batches),
        wide=last.wide,
        queue_ms=round(stages["queue"] * 1000, 3),
        inference_ms=round(stages["inference"] * 1000, 3),
        preempted_ms=round(stages["preempted"] * 1000, 3),
        yields=last.yields,
        postprocess_ms=round(stages["postprocess"] * 1000, 3),
    )
    return stages, batches


# openhood's tokenizer runs at ~60-80 ns/char on a batch (measured; docs/server.md), so this many
# characters block the event loop for about a millisecond — cheaper inline than a thread hop.
INLINE_TOKENIZE_CHARS = 16384


@dataclass
class Embedded:
    """One request's pooled vectors, in input order, with what its response and log need."""

    vectors: np.ndarray  # (n, dim) float32
    lengths: list[int]
    truncated: np.ndarray  # (n,) bool
    # Records metrics/spans/log fields; call once the response is built (with its build time as
    # the request's end, or now).
    finish: Callable[..., None]


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
    drain cut, failed batch, full queue — are raised by ``submit_and_wait``)."""
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
            "openhood.batch_yields": b.yields,  # preempted this often (its inference span includes the wait)
            "openhood.batch_preempted_ms": round(b.preempted_ns / 1e6, 3),
        }
        child("queue", t_tok1, b.started_ns, **batch_attrs)
        child("inference", b.inference_start_ns, b.inference_end_ns, **batch_attrs)
    child("postprocess", t_post0, t_end, **{"openhood.inputs": len(lengths)})
    root.set_attribute("http.status_code", 200)
    root.end(end_time=to_epoch_ns(t_end))
