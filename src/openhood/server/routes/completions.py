"""``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI-compatible), the ``generate`` task's routes.

One request, end to end: read the body (413 over the cap) → parse/validate (400/422) → route by
``model`` (404 unknown) → render the chat template (chat) and tokenize → check it can ever run
(400: context or KV budget) → ``submit`` to the model's step scheduler (429 when its waiting
queue is full, 503 draining) → the scheduler's worker thread sends each token's event into this
request's asyncio queue (``loop.call_soon_threadsafe``) → JSON, or server-sent events
(``data: {chunk}`` per text piece, a last chunk with ``finish_reason``, an optional usage
chunk, ``data: [DONE]``) exactly as OpenAI writes them, so the official SDK streams unchanged.
``logprobs`` ride on the token events and are shaped by ``server.completion_logprobs`` (a chunk
carries the logprobs of the tokens whose text it carries); a ``response_format`` is compiled to a
token grammar once per format and model (``generate.json_grammar`` + ``generate.token_mask``,
a new schema in a thread) and constrains that sequence alone.

A client that goes away cancels its sequence (freed at the next step). When the drain's grace
period runs out, every sequence is cut (``finish_reason: "length"``) and its answer completes
normally. Metrics, the log line and the trace get lengths, counts and times — never text.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, Request
from opentelemetry import trace
from starlette.responses import Response, StreamingResponse

from openhood.generate.generator import GenerationConfig
from openhood.generate.json_grammar import SchemaError, response_format_dfa
from openhood.generate.logprobs import TokenLogprobs
from openhood.generate.sampling import SamplingParams
from openhood.generate.token_mask import TokenGrammar
from openhood.scheduler import length_label
from openhood.scheduler.generation import FinishEvent, GenerationHandle, TokenEvent
from openhood.server.body import read_body, wait_disconnect
from openhood.server.completion_logprobs import LegacyLogprobs, chat_logprobs
from openhood.server.completion_schemas import CompletionRequest, parse_chat_request, parse_completion_request
from openhood.server.errors import APIError, ClientGone, admission, json_response
from openhood.server.middleware import RequestRecord
from openhood.server.openapi_completions import CHAT_REQUEST, CHAT_RESPONSES, COMPLETION_REQUEST, COMPLETION_RESPONSES
from openhood.server.state import GenerationRuntime, ServerState
from openhood.server.tracing import child_span, to_epoch_ns

log = logging.getLogger("openhood.server")

INLINE_RENDER_CHARS = 16384  # longer prompts are templated and tokenized in a thread (see embeddings.py)


def register(app: FastAPI, state: ServerState) -> None:
    @app.post("/v1/chat/completions", openapi_extra=CHAT_REQUEST, responses=CHAT_RESPONSES)
    async def chat_completions(request: Request) -> Response:
        return await complete(request, state, chat=True)

    @app.post("/v1/completions", openapi_extra=COMPLETION_REQUEST, responses=COMPLETION_RESPONSES)
    async def completions(request: Request) -> Response:
        return await complete(request, state, chat=False)


@dataclass
class Generation:
    """One request's sequence as the handler sees it: its events, and the times its metrics need."""

    rt: GenerationRuntime
    handle: GenerationHandle
    queue: asyncio.Queue[TokenEvent | FinishEvent]
    record: RequestRecord
    prompt_tokens: int
    max_tokens: int
    t_tok: tuple[int, int]  # tokenize start, end (monotonic ns)
    tracer: trace.Tracer
    first_ns: int = 0  # first token handed to the client
    last_ns: int = 0
    finish: FinishEvent | None = None
    gaps: list[float] = field(default_factory=list)  # inter-token seconds

    def observe(self, event: TokenEvent | FinishEvent) -> None:
        """Token timing as the client gets it: TTFT from the request's arrival, gaps between tokens."""
        now = time.monotonic_ns()
        tokens = event.tokens if isinstance(event, TokenEvent) else event.completion_tokens
        if tokens and not self.first_ns:
            self.first_ns = now
            self.rt.metrics.ttft.observe((now - self.record.start_ns) / 1e9)
        elif isinstance(event, TokenEvent) and self.last_ns:
            gap = (now - self.last_ns) / 1e9
            self.gaps.append(gap)
            self.rt.metrics.inter_token.observe(gap)
        self.last_ns = now
        if isinstance(event, FinishEvent):
            self.finish = event

    async def events(self) -> AsyncIterator[TokenEvent | FinishEvent]:
        while self.finish is None:
            event = await self.queue.get()
            self.observe(event)
            yield event


async def complete(request: Request, st: ServerState, *, chat: bool) -> Response:
    config = st.config
    body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    req = parse_chat_request(body) if chat else parse_completion_request(body)
    rt = st.route_generate(req.model)
    record: RequestRecord = request.state.record
    record.fields.update(model=rt.model.name, stream=req.stream)
    gen = start(st, rt, req, record, await encode(rt, req, record), await grammar_of(rt, req))
    cut_watch = asyncio.ensure_future(st.lifecycle.cut.wait())
    cut_watch.add_done_callback(lambda t: None if t.cancelled() else rt.scheduler.cut_all())
    name, created = rt.model.name, int(time.time())
    if req.stream:
        chunks = sse_chunks(gen, req, name, created, cut_watch)
        return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    try:
        text, entries = await collect(request, gen)
    finally:
        cut_watch.cancel()
    fin = gen.finish
    assert fin is not None
    if fin.finish_reason == "error":
        raise APIError(
            500,
            "generation failed; the server keeps serving, retry the request",
            type="server_error",
            code="inference_failed",
            param=None,
        )
    usage = usage_of(fin)
    token_bytes = rt.model.generator.tokenizer.token_bytes
    logprobs: dict[str, Any] | None = None
    if req.logprobs is not None:
        logprobs = chat_logprobs(entries, token_bytes) if chat else LegacyLogprobs(token_bytes).columns(entries)
    if chat:
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": created,
            "model": name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs,
                    "finish_reason": fin.finish_reason,
                }
            ],
            "usage": usage,
            "system_fingerprint": None,
        }
    else:
        payload = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": fin.finish_reason}],
            "usage": usage,
            "system_fingerprint": None,
        }
    return json_response(payload)


async def encode(rt: GenerationRuntime, req: CompletionRequest, record: RequestRecord) -> tuple[list[int], int, int]:
    """Prompt → token ids (chat template for chat), in a thread when long; 400 when it cannot be."""
    generator = rt.model.generator
    chars = len(req.prompt) if isinstance(req.prompt, str) else sum(len(m["content"]) for m in req.prompt)
    record.fields["chars"] = chars
    t0 = time.monotonic_ns()
    try:
        if chars <= INLINE_RENDER_CHARS:
            ids = generator.encode_prompt(req.prompt, raw=not req.chat)
        else:
            ids = await asyncio.to_thread(generator.encode_prompt, req.prompt, not req.chat)
    except ValueError as exc:  # a template that refuses the messages, text the tokenizer cannot encode
        raise APIError(
            400,
            f"the prompt could not be prepared: {exc}",
            code="invalid_prompt",
            param="messages" if req.chat else "prompt",
        ) from exc
    return ids, t0, time.monotonic_ns()


async def grammar_of(rt: GenerationRuntime, req: CompletionRequest) -> TokenGrammar | None:
    """The request's response format compiled for this model's vocabulary (cached per format; a new
    schema compiles in a thread), or None for plain text. 400 naming what the schema uses outside the subset."""
    if req.response_format is None:
        return None
    key = orjson.dumps(req.response_format)  # property order matters: it is the order the text is written in
    rf = req.response_format
    try:
        return await asyncio.to_thread(rt.model.generator.grammars.get, key, lambda: response_format_dfa(rf))
    except SchemaError as exc:
        raise APIError(400, f"'response_format': {exc}", code="unsupported_schema", param="response_format") from exc


def start(
    st: ServerState,
    rt: GenerationRuntime,
    req: CompletionRequest,
    record: RequestRecord,
    encoded: tuple[list[int], int, int],
    grammar: TokenGrammar | None = None,
) -> Generation:
    """Check the request can run, then queue it; its events arrive in the returned ``Generation``."""
    ids, t0, t1 = encoded
    scheduler = rt.scheduler
    max_tokens = req.max_tokens
    if max_tokens is None:  # OpenAI's default is "what fits"; ours is also capped by the usual answer length
        max_tokens = max(
            1, min(GenerationConfig().max_tokens, scheduler.policy.max_tokens, scheduler.max_context - len(ids))
        )
    record.fields.update(prompt_tokens=len(ids), max_tokens=max_tokens, tokenize_ms=round((t1 - t0) / 1e6, 3))
    try:
        scheduler.check_fits(len(ids), max_tokens)
    except ValueError as exc:
        too_many = max_tokens > scheduler.policy.max_tokens
        raise APIError(
            400,
            str(exc),
            code="max_tokens_too_large" if too_many else "context_length_exceeded",
            param="max_tokens" if too_many else ("messages" if req.chat else "prompt"),
        ) from exc
    vocab = rt.model.generator.tokenizer.vocab_size
    unknown = [t for t, _ in req.logit_bias if t >= vocab]
    if unknown:
        raise APIError(
            422,
            f"'logit_bias' names token id {unknown[0]}; this model's vocabulary has {vocab} tokens",
            code="invalid_schema",
            param="logit_bias",
        )
    sampling = SamplingParams(
        temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, seed=req.seed, logit_bias=req.logit_bias
    )
    if grammar is not None and grammar.min_tokens > max_tokens:
        raise APIError(
            400,
            f"max_tokens is {max_tokens}; the shortest text the response format accepts needs {grammar.min_tokens}",
            code="max_tokens_too_small",
            param="max_tokens",
        )
    config = GenerationConfig(max_tokens, sampling, req.stop, logprobs=req.logprobs, grammar=grammar)
    queue: asyncio.Queue[TokenEvent | FinishEvent] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def sink(event: TokenEvent | FinishEvent) -> None:  # on the scheduler's thread
        loop.call_soon_threadsafe(queue.put_nowait, event)

    with admission(rt.metrics):
        handle = scheduler.submit(ids, config, sink)
    rt.metrics.prompt_tokens.inc(len(ids))
    return Generation(rt, handle, queue, record, len(ids), max_tokens, (t0, t1), st.tracer)


async def collect(request: Request, gen: Generation) -> tuple[str, list[TokenLogprobs]]:
    """The whole text and its tokens' logprobs (non-streaming; [] unless asked), or ``ClientGone``
    when the client leaves first (sequence freed)."""

    async def read_all() -> tuple[str, list[TokenLogprobs]]:
        text: list[str] = []
        entries: list[TokenLogprobs] = []
        async for event in gen.events():
            text.append(event.text)
            entries.extend(event.logprobs)
        return "".join(text), entries

    reading = asyncio.ensure_future(read_all())
    gone = asyncio.ensure_future(wait_disconnect(request.receive))
    try:
        await asyncio.wait({reading, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not reading.done():
            reading.cancel()
            gen.handle.cancel()
        finish_request(gen)
    if not reading.done() or reading.cancelled():
        raise ClientGone()
    return reading.result()


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def sse_chunks(
    gen: Generation, req: CompletionRequest, name: str, created: int, cut_watch: asyncio.Future[Any]
) -> AsyncIterator[bytes]:
    """OpenAI's stream: a chunk per text piece, the finish chunk, [usage chunk], ``[DONE]``.
    Cancelled (client gone) → the sequence is cancelled and freed at the scheduler's next step."""
    chat = req.chat
    base = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": name,
        "system_fingerprint": None,
    }
    usage_field = {"usage": None} if req.include_usage else {}
    token_bytes = gen.rt.model.generator.tokenizer.token_bytes
    legacy = LegacyLogprobs(token_bytes)

    def chunk(
        text: str | None, finish_reason: str | None, role: bool = False, entries: list[TokenLogprobs] | None = None
    ) -> bytes:
        logprobs = None
        if entries is not None:  # a content chunk of a request that asked for logprobs
            logprobs = chat_logprobs(entries, token_bytes) if chat else legacy.columns(entries)
        if chat:
            delta: dict[str, str] = (
                {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            )
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
        return sse({**base, "choices": [choice], **usage_field})

    try:
        if chat:
            yield chunk(None, None, role=True)
        pending: list[TokenLogprobs] = []  # tokens whose text is held back (a partial character, a stop prefix)
        async for event in gen.events():
            pending.extend(event.logprobs)
            if event.text or (pending and isinstance(event, FinishEvent)):
                yield chunk(event.text, None, entries=pending if req.logprobs is not None else None)
                pending = []
        fin = gen.finish
        assert fin is not None
        if fin.finish_reason == "error":
            yield sse(
                {
                    "error": {
                        "message": "generation failed; retry the request",
                        "type": "server_error",
                        "param": None,
                        "code": "inference_failed",
                    }
                }
            )
        else:
            yield chunk(None, fin.finish_reason)
            if req.include_usage:
                yield sse({**base, "choices": [], "usage": usage_of(fin)})
        yield b"data: [DONE]\n\n"
    finally:
        cut_watch.cancel()
        if gen.finish is None:  # the client went away mid-stream (or the app is shutting down)
            gen.handle.cancel()
            gen.record.fields["disconnected"] = True
            gen.rt.metrics.server.client_disconnects.inc()
        finish_request(gen)


def usage_of(fin: FinishEvent) -> dict[str, int]:
    return {
        "prompt_tokens": fin.prompt_tokens,
        "completion_tokens": fin.completion_tokens,
        "total_tokens": fin.prompt_tokens + fin.completion_tokens,
    }


def finish_request(gen: Generation) -> None:
    """Log fields, metrics and the trace of one generation (counts and times only)."""
    fin, record, rt = gen.finish, gen.record, gen.rt
    end_ns = time.monotonic_ns()
    fields = record.fields
    if fin is None:
        rt.metrics.finished("cancelled")
        fields["finish_reason"] = "cancelled"
        return
    rt.metrics.finished(fin.finish_reason)
    fields.update(completion_tokens=fin.completion_tokens, finish_reason=fin.finish_reason)
    if fin.cut:
        fields["cut"] = True
    if fin.admitted_ns:
        fields["queue_ms"] = round((fin.admitted_ns - fin.submitted_ns) / 1e6, 3)
    if gen.first_ns:
        fields["ttft_ms"] = round((gen.first_ns - record.start_ns) / 1e6, 3)
    if gen.gaps:
        gaps = sorted(gen.gaps)
        fields["inter_token_p50_ms"] = round(gaps[len(gaps) // 2] * 1000, 3)
        fields["inter_token_max_ms"] = round(gaps[-1] * 1000, 3)
    if gen.first_ns and fin.completion_tokens > 1 and gen.last_ns > gen.first_ns:
        fields["decode_tokens_per_s"] = round((fin.completion_tokens - 1) / ((gen.last_ns - gen.first_ns) / 1e9), 2)
    total = (end_ns - record.start_ns) / 1e9
    stages = {"total": total, "tokenize": (gen.t_tok[1] - gen.t_tok[0]) / 1e9}
    if fin.admitted_ns:
        stages["queue"] = (fin.admitted_ns - fin.submitted_ns) / 1e9
        stages["inference"] = (fin.end_ns - fin.admitted_ns) / 1e9
    rt.metrics.window.add(length_label(gen.prompt_tokens), stages)
    trace_request(rt, gen, fin, end_ns)


def trace_request(rt: GenerationRuntime, gen: Generation, fin: FinishEvent, end_ns: int) -> None:
    tracer = gen.tracer
    if isinstance(tracer, trace.NoOpTracer):
        return
    record = gen.record
    root = tracer.start_span(
        "generation.request",
        start_time=to_epoch_ns(record.start_ns),
        attributes={
            "openhood.request_id": record.request_id,
            "openhood.model": rt.model.name,
            "openhood.prompt_tokens": fin.prompt_tokens,
            "openhood.completion_tokens": fin.completion_tokens,
            "openhood.max_tokens": gen.max_tokens,
            "openhood.finish_reason": fin.finish_reason,
            "openhood.chars": record.fields.get("chars", 0),
        },
    )
    child = functools.partial(child_span, tracer, root)

    child("tokenize", *gen.t_tok, **{"openhood.prompt_tokens": fin.prompt_tokens})
    if fin.admitted_ns:
        child("queue", fin.submitted_ns, fin.admitted_ns)
        if fin.first_token_ns:
            child("prefill", fin.admitted_ns, fin.first_token_ns, **{"openhood.prompt_tokens": fin.prompt_tokens})
            child("decode", fin.first_token_ns, fin.end_ns, **{"openhood.completion_tokens": fin.completion_tokens})
    root.end(end_time=to_epoch_ns(end_ns))
