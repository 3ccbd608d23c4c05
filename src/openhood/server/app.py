"""The ASGI app: OpenAI-compatible ``/v1/embeddings`` and ``/v1/models``, health, metrics, stats.

One request, end to end (each stage timed; spans, metrics and the log line come from the same
timestamps):
  middleware (request id, drain → 503, Bearer auth → 401, in-flight count, status metrics, log)
  → read body with a byte cap (413 before parsing) → parse/validate (400/422)
  → tokenize with truncation (413 if the caller asked not to truncate) → ``submit`` to the
  scheduler (429 when full) → await the futures *or* the client's disconnect (then cancel: the
  worker drops the sequences before inference) → postprocess (float list or base64) → JSON.

Trade-offs: the body is parsed by hand rather than by FastAPI's dependency injection, so size
limits apply before parsing and every error has OpenAI's shape; the middleware is plain ASGI
(not ``BaseHTTPMiddleware``) so it neither buffers responses nor hides client disconnects.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import re
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI, Request
from opentelemetry import trace
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import PlainTextResponse, Response

from openhood.scheduler import (
    BatchFailedError,
    DynamicBatcher,
    ItemResult,
    LengthBuckets,
    QueueFullError,
    SchedulerStoppedError,
    length_label,
)
from openhood.server.auth import authorized
from openhood.server.body import ClientGone, read_body
from openhood.server.config import ServerConfig
from openhood.server.errors import APIError, drain_deadline, draining, error_response, json_response, unauthorized
from openhood.server.health import ReadinessProbe
from openhood.server.lifecycle import Lifecycle, check_grace, worst_case_drain_s
from openhood.server.logs import log_access, request_id_var
from openhood.server.metrics import ServerMetrics
from openhood.server.openapi import EMBEDDINGS_ROUTE
from openhood.server.schemas import parse_embeddings_request
from openhood.server.tracing import to_epoch_ns

log = logging.getLogger("openhood.server")

ROUTES = ("/v1/embeddings", "/v1/models", "/health/live", "/health/ready", "/metrics", "/stats")
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")  # echoed in headers and logs: keep it inert
# openhood's tokenizer runs at ~60-80 ns/char on a batch (measured; docs/server.md), so this many
# characters block the event loop for about a millisecond — cheaper inline than a thread hop.
# Bigger requests tokenize in a thread so one of them cannot stall every other connection's I/O.
INLINE_TOKENIZE_CHARS = 16384


@dataclass
class RequestRecord:
    """What the log line, metrics and spans of one request are made of. Lengths, never text."""

    request_id: str
    route: str
    method: str
    start_ns: int = field(default_factory=time.monotonic_ns)
    status: int = 0
    fields: dict = field(default_factory=dict)


@dataclass
class Engine:
    """The model as the server sees it: a tokenizer and one backend instance per inference
    worker (``--workers``; ``Embedder``'s two halves, the backend replicated)."""

    tokenizer: object
    backends: list  # one per worker; worker ``i`` only ever calls ``backends[i]``
    model_name: str
    max_length: int
    dim: int

    @property
    def backend(self):
        """The first worker's backend: name, dim and other facts shared by all of them."""
        return self.backends[0]


class ObservabilityMiddleware:
    """Request id, drain/auth gates for /v1, in-flight count, status metrics, the JSON log line."""

    def __init__(self, app, *, state: "ServerState"):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = self.state
        path = scope["path"]
        route = path if path in ROUTES else "other"
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        supplied = headers.get("x-request-id", "")
        request_id = supplied if REQUEST_ID.match(supplied) else uuid.uuid4().hex
        record = RequestRecord(request_id, route, scope["method"])
        request_id_var.set(request_id)  # this task's log lines (asyncio copies the context per task)
        scope.setdefault("state", {})["record"] = record
        is_api = path.startswith("/v1/")

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                record.status = message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                has_close = any(k.lower() == b"connection" for k, _ in message.get("headers", []))
                if st.lifecycle.draining and not has_close:
                    extra.append((b"connection", b"close"))  # let keep-alive clients move elsewhere
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        gate = None
        if is_api and st.lifecycle.draining:
            gate = draining()
            st.metrics.rejected.labels("draining").inc()
        elif is_api and st.config.api_key and not authorized(headers.get("authorization"), st.config.api_key):
            gate = unauthorized()
        try:
            if gate is not None:
                await error_response(gate)(scope, receive, send_wrapper)
                return
            if is_api:
                st.lifecycle.in_flight += 1
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                if is_api:
                    st.lifecycle.in_flight -= 1
        finally:
            if record.status == 0:
                record.status = 500  # an exception escaped before a response started
            st.metrics.http_requests.labels(route, str(record.status)).inc()
            if is_api:  # health probes and scrapes would drown the request lines
                log_access(
                    {
                        "request_id": request_id,
                        "method": record.method,
                        "route": route,
                        "status": record.status,
                        "total_ms": round((time.monotonic_ns() - record.start_ns) / 1e6, 3),
                        **record.fields,
                    }
                )


class ServerState:
    def __init__(self, config: ServerConfig, engine: Engine, tracer, lifecycle: Lifecycle | None = None):
        self.config = config
        self.engine = engine
        self.tracer = tracer or trace.NoOpTracer()
        self.lifecycle = lifecycle or Lifecycle()
        self.buckets = LengthBuckets.for_model(config.buckets, engine.max_length)
        self.metrics = ServerMetrics(config.stats_window, in_flight_fn=lambda: self.lifecycle.in_flight)
        self.batcher = DynamicBatcher(
            [backend.embed for backend in engine.backends],
            self.buckets,
            pad_id=int(engine.tokenizer.pad_id),
            max_batch_size=config.max_batch_size,
            max_batch_tokens=max(config.max_batch_tokens, self.buckets.bounds[-1]),
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
            pad_to=config.pad_to,
            priority=config.priority,
            max_age_ms=config.max_age_ms,
            short_lane_tokens=config.short_lane_tokens,
            on_batch=self.metrics.observe_batch,
            on_drop=self.metrics.dropped.inc,
        )
        self.metrics.queue_depth.set_function(lambda: self.batcher.queue_depth)
        self.readiness = ReadinessProbe(
            self.batcher,
            engine.tokenizer,
            engine.backends,
            timeout_s=config.health_timeout_s,
            stall_timeout_s=config.stall_timeout_s,
        )
        # Accepted values of the request's "model" field: the full id and its last path part.
        self.model_aliases = {engine.model_name, engine.model_name.rsplit("/", 1)[-1]}

    def drain_batch_rows(self) -> int:
        """Rows of a full batch of the longest bucket (what a full queue drains in)."""
        return max(1, min(self.config.max_batch_size, self.config.max_batch_tokens // self.buckets.bounds[-1]))

    def warm_up(self, backend) -> float:
        """One call per bucket length on ``backend`` (run on the worker that owns it), then one
        full batch of the longest bucket; returns that batch's seconds (the drain estimate's unit)."""
        for length in self.buckets.bounds:
            ids = np.full((1, length), self.engine.tokenizer.pad_id, dtype=np.int64)  # (1, T)
            ids[0, 0], ids[0, -1] = self.engine.tokenizer.cls_id, self.engine.tokenizer.sep_id
            backend.embed(ids, np.ones_like(ids))
        ids = np.repeat(ids, self.drain_batch_rows(), axis=0)  # (rows, T_max)
        t0 = time.perf_counter()
        backend.embed(ids, np.ones_like(ids))
        return time.perf_counter() - t0

    async def warm_up_all(self) -> float:
        """Warm every worker's engine; the slowest full-batch time among them."""
        jobs = [self.batcher.run_exclusive(functools.partial(self.warm_up, b), worker=w) for w, b in enumerate(self.engine.backends)]
        return max(await asyncio.gather(*(asyncio.wrap_future(j) for j in jobs)))


def create_app(config: ServerConfig, engine: Engine, *, tracer=None, lifecycle: Lifecycle | None = None) -> FastAPI:
    state = ServerState(config, engine, tracer, lifecycle)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.batcher.start()
        # Warm the engine once per bucket length before the port opens, so the first real
        # requests do not pay for first-call allocations (runs on the worker, like all inference).
        t0 = time.perf_counter()
        batch_s = await state.warm_up_all()
        log.info("engine warmed up for buckets %s in %.2f s", state.buckets, time.perf_counter() - t0)
        check_grace(config.grace_period_s, worst_case_drain_s(config.max_queue, state.drain_batch_rows(), batch_s, len(engine.backends)))
        yield
        # Normally DrainingServer already stopped the worker; this covers in-process use.
        await asyncio.to_thread(state.batcher.stop, config.grace_period_s)

    app = FastAPI(title="openhood", version="0.1.0", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.openhood = state
    app.add_middleware(ObservabilityMiddleware, state=state)

    @app.exception_handler(APIError)
    async def api_error_handler(request: Request, exc: APIError):
        record = getattr(request.state, "record", None)
        if record is not None:
            record.fields["error"] = exc.code  # the code only: messages may name limits, never text
        return error_response(exc)

    @app.exception_handler(ClientGone)
    async def client_gone_handler(request: Request, exc: ClientGone):
        # The client closed the connection mid-body: its fault, not ours — no 500, no traceback.
        record = getattr(request.state, "record", None)
        if record is not None:
            record.fields["disconnected"] = True
        state.metrics.client_disconnects.inc()
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    @app.exception_handler(StarletteHTTPException)
    async def http_error_handler(request: Request, exc: StarletteHTTPException):
        # Unknown routes and wrong methods: keep OpenAI's error shape there too.
        return error_response(APIError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None, param=None))

    @app.exception_handler(Exception)
    async def unexpected_error_handler(request: Request, exc: Exception):
        log.exception("unhandled error in %s", request.url.path)
        return error_response(APIError(500, "internal server error", type="server_error", code="internal_error", param=None))

    @app.post("/v1/embeddings", **EMBEDDINGS_ROUTE)
    async def create_embeddings(request: Request):
        return await _embeddings(request, state)

    @app.get("/v1/models")
    async def list_models():
        return json_response(
            {
                "object": "list",
                "data": [{"id": engine.model_name, "object": "model", "created": 0, "owned_by": "openhood"}],
            }
        )

    @app.get("/health/live")
    async def live():
        return json_response({"status": "alive"})

    @app.get("/health/ready")
    async def ready():
        body = {
            "queue_depth": state.batcher.queue_depth,
            "in_flight": state.lifecycle.in_flight,
            "rss_bytes": state.metrics.rss_bytes(),
            "worker_busy_s": round(state.batcher.busy_for_s(), 3),
            "workers": state.batcher.workers,
            "backend": engine.backend.name,
            "model": engine.model_name,
        }
        if state.lifecycle.draining:
            ok, details = False, {"reason": "draining: the server is shutting down"}
        else:
            ok, details = await state.readiness.check()
        state.metrics.ready.set(1 if ok else 0)
        return json_response({"status": "ready" if ok else "not_ready", **details, **body}, 200 if ok else 503)

    @app.get("/metrics", response_class=PlainTextResponse)  # documented as text/plain in /openapi.json
    async def metrics():
        return PlainTextResponse(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/stats")
    async def stats():
        return json_response(
            {
                **state.metrics.window.table(),
                "queue_depth": state.batcher.queue_depth,
                "in_flight": state.lifecycle.in_flight,
                "buckets": list(state.buckets.bounds),
            }
        )

    return app


async def _wait_disconnect(receive) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _tokenize(tokenizer, texts: list[str], max_length: int):
    batch = tokenizer.encode_batch(texts, max_length=max_length)
    return [np.asarray(ids) for ids in batch], np.asarray(batch.truncated, dtype=bool)


async def _embeddings(request: Request, st: ServerState) -> Response:
    record: RequestRecord = request.state.record
    config, engine = st.config, st.engine
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    req = parse_embeddings_request(body, max_inputs=config.max_inputs_per_request, dim=engine.dim)
    if req.model is not None and req.model not in st.model_aliases:
        raise APIError(404, f"model '{req.model[:100]}' is not served here; this server serves '{engine.model_name}'", code="model_not_found", param="model")
    truncate = config.truncate if req.truncate is None else req.truncate
    chars = sum(len(t) for t in req.texts)
    record.fields.update(inputs=len(req.texts), chars=chars, encoding_format=req.encoding_format)

    t_tok0 = time.monotonic_ns()
    try:
        if chars <= INLINE_TOKENIZE_CHARS:
            sequences, truncated = _tokenize(engine.tokenizer, req.texts, engine.max_length)
        else:
            sequences, truncated = await asyncio.to_thread(_tokenize, engine.tokenizer, req.texts, engine.max_length)
    except ValueError as exc:  # the tokenizer refuses text it cannot encode exactly (e.g. lone surrogates)
        raise APIError(400, f"input could not be tokenized: {exc}", code="invalid_text", param="input")
    t_tok1 = time.monotonic_ns()
    lengths = [len(s) for s in sequences]
    bucket = length_label(max(lengths))
    record.fields.update(tokens=sum(lengths), max_tokens=max(lengths), truncated=int(truncated.sum()), bucket=bucket)
    record.fields["tokenize_ms"] = round((t_tok1 - t_tok0) / 1e6, 3)
    if truncated.any() and not truncate:
        first = int(np.flatnonzero(truncated)[0])
        raise APIError(
            413,
            f"input[{first}] is longer than the model's maximum of {engine.max_length} tokens and truncation "
            "is off for this request ('truncate': false); shorten it or allow truncation",
            code="input_too_long",
            param="input",
        )

    try:
        futures = st.batcher.submit(sequences)
    except QueueFullError as exc:
        st.metrics.rejected.labels("queue_full").inc()
        raise APIError(429, str(exc) + "; retry later", type="rate_limit_error", code="queue_full", param=None,
                       headers={"Retry-After": str(exc.retry_after_s)})
    except SchedulerStoppedError:
        st.metrics.rejected.labels("draining").inc()
        raise draining()

    results_task = asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    # Read the outcome even when nobody awaits it any more (client gone, drain cut): an
    # unretrieved exception would otherwise surface as asyncio's "exception was never retrieved".
    results_task.add_done_callback(lambda t: t.cancelled() or t.exception())
    disconnect_task = asyncio.ensure_future(_wait_disconnect(request.receive))
    cut_task = asyncio.ensure_future(st.lifecycle.cut.wait())
    try:
        await asyncio.wait({results_task, disconnect_task, cut_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler itself is cancelled
        disconnect_task.cancel()
        cut_task.cancel()
        client_gone = not results_task.done()
        if client_gone:
            # Cancelling the futures makes the worker skip sequences it has not started.
            results_task.cancel()
    if client_gone and st.lifecycle.cut.is_set():
        st.metrics.drain_cut.inc()
        log.warning("request cut at the drain deadline", extra={"fields": {"event": "drain_cut", "request_id": record.request_id}})
        raise drain_deadline()
    if client_gone:
        raise ClientGone()
    try:
        results: list[ItemResult] = results_task.result()
    except BatchFailedError as exc:
        for f in futures:  # sequences of this request still queued in other batches are moot now
            f.cancel()
        raise APIError(500, f"{exc}; the server keeps serving, retry the request", type="server_error", code="inference_failed", param=None)

    t_post0 = time.monotonic_ns()
    vectors = np.stack([r.vector for r in results]).astype(np.float32, copy=False)  # (n, dim)
    if req.encoding_format == "base64":
        # OpenAI's base64 format: the little-endian float32 bytes of each vector.
        little = vectors.astype("<f4", copy=False)
        embeddings = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        embeddings = list(vectors)  # orjson writes numpy rows directly
    usage = sum(lengths)
    payload = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)],
        "model": engine.model_name,
        "usage": {"prompt_tokens": usage, "total_tokens": usage},
        "truncated_inputs": np.flatnonzero(truncated).tolist(),
    }
    response = json_response(payload, headers={"X-Openhood-Truncated": str(int(truncated.sum()))})
    t_end = time.monotonic_ns()
    _finish(st, record, results, lengths, int(truncated.sum()), bucket, (t_tok0, t_tok1, t_post0, t_end))
    return response


def _finish(st: ServerState, record: RequestRecord, results: list[ItemResult], lengths, truncated: int, bucket, times) -> None:
    """Stage times → log fields, metrics and spans (all from the same timestamps)."""
    t_tok0, t_tok1, t_post0, t_end = times
    batches = {r.batch.batch_id: r.batch for r in results}.values()
    # The request waits for its slowest batch: its queue/inference stages are that batch's.
    last = max(batches, key=lambda b: b.inference_end_ns)
    stages = {
        "total": (t_end - record.start_ns) / 1e9,
        "tokenize": (t_tok1 - t_tok0) / 1e9,
        "queue": (last.started_ns - t_tok1) / 1e9,
        "inference": (last.inference_end_ns - last.inference_start_ns) / 1e9,
        "postprocess": (t_end - t_post0) / 1e9,
    }
    st.metrics.observe_request(stages, bucket, lengths, truncated)
    record.fields.update(
        batches=len(batches),
        batch_sizes=sorted(b.size for b in batches),
        queue_ms=round(stages["queue"] * 1000, 3),
        inference_ms=round(stages["inference"] * 1000, 3),
        postprocess_ms=round(stages["postprocess"] * 1000, 3),
    )
    tracer = st.tracer
    if isinstance(tracer, trace.NoOpTracer):
        return
    root = tracer.start_span(
        "embeddings.request",
        start_time=to_epoch_ns(record.start_ns),
        attributes={
            "openhood.request_id": record.request_id,
            "openhood.inputs": len(lengths),
            "openhood.tokens": sum(lengths),
            "openhood.max_tokens": max(lengths),
            "openhood.truncated": truncated,
            "openhood.length_bucket": bucket,
            "openhood.chars": record.fields.get("chars", 0),
        },
    )
    ctx = trace.set_span_in_context(root)

    def child(name: str, start: int, end: int, **attributes) -> None:
        span = tracer.start_span(name, context=ctx, start_time=to_epoch_ns(start), attributes=attributes)
        span.end(end_time=to_epoch_ns(end))

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
