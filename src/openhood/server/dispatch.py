"""A request's items through its model's batcher: submit, wait, and account for the stages.

Every batched route (embeddings and the TEI routes, images, classify) does the same between
"inputs prepared" and "outputs ready": admission (429 full / 503 draining), one hop from the
worker threads back to the loop, and a wait that ends on the first of three things — the
results, the client leaving (499: its unstarted items are cancelled), or the drain deadline
(503 ``drain_deadline``). A failed batch fails only this request (500). Then the request's
stage times come from its slowest batch (it waits for that one). Kept in one place so a route
cannot forget one of the endings. The trade-off: results arrive all at once, not per item.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request

from openhood.scheduler import BatchFailedError, BatchInfo, ItemResult
from openhood.server.body import wait_disconnect
from openhood.server.completion import gather_items
from openhood.server.errors import APIError, ClientGone, admission, drain_deadline
from openhood.server.middleware import RequestRecord
from openhood.server.state import ModelRuntime, ServerState

log = logging.getLogger("openhood.server")


async def submit_and_wait(
    request: Request, st: ServerState, rt: ModelRuntime, payloads: Sequence[Any], lengths: Sequence[int]
) -> list[ItemResult]:
    """Queue the items on ``rt``'s batcher and return their results in order, or raise the
    request's ending: ``APIError`` 429/503/500, ``drain_deadline()`` or ``ClientGone``."""
    with admission(rt.metrics):
        futures = rt.batcher.submit(list(payloads), list(lengths))
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
