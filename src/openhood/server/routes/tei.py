"""Hugging Face text-embeddings-inference (TEI) routes for the ``embed`` task.

``POST /embed`` and TEI's root ``POST /`` (what ``huggingface_hub.InferenceClient`` calls for
feature extraction), ``/embed_all``, ``/tokenize``, ``/decode``, ``/similarity`` and
``GET /info``, with TEI's request and response shapes and its error body
``{"error": message, "error_type": one of TEI's ErrorType}`` (statuses as in openhood's OpenAI
route: 400 malformed JSON or bad content, 422 bad field, 404 unknown model, 413 over a limit).

Pooled vectors go through the model's scheduler like ``/v1/embeddings`` (same tokenizing, same
batches, same metrics). What the pooled path cannot give — every token's vector
(``/embed_all``) and the un-normalized mean of a normalizing model (``"normalize": false``) —
runs the model's backend directly on one of its worker threads (``run_exclusive``), between two
batches. The trade-off: those requests are not batched with others; they are the rare ones.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from starlette.responses import Response

import openhood
from openhood.models.served import Prepared
from openhood.models.tasks import Task
from openhood.server.body import read_body
from openhood.server.errors import APIError, json_response
from openhood.server.infer import (
    INLINE_TOKENIZE_CHARS,
    check_dimensions,
    embed_texts,
    shorten,
    tokenize_checked,
)
from openhood.server.schemas import TEXT_UNION, load_json_object, texts_from, validate_body
from openhood.server.state import ModelRuntime, ServerState
from openhood.server.tei_schemas import DecodeBody, EmbedAllBody, EmbedBody, SimilarityBody, TokenizeBody

TASK = Task.EMBED
Handler = Callable[[Request, ServerState], Awaitable[Response]]

# TEI's ErrorType values (its OpenAPI document) by status; tokenizer failures are "Tokenizer".
ERROR_TYPES = {413: "Validation", 429: "Overloaded", 503: "Unhealthy"}
INPUTS = {"inputs": TEXT_UNION}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # openhood's precision → TEI's model_dtype


def error_type(exc: APIError) -> str:
    if exc.code == "invalid_text":
        return "Tokenizer"
    if exc.status >= 500:
        return "Unhealthy" if exc.status == 503 else "Backend"
    return ERROR_TYPES.get(exc.status, "Validation")


def tei_errors(handler: Handler, state: ServerState) -> Callable[[Request], Awaitable[Response]]:
    """The handler, with its ``APIError``s answered in TEI's error shape instead of OpenAI's."""

    async def route(request: Request) -> Response:
        try:
            return await handler(request, state)
        except APIError as exc:
            record = getattr(request.state, "record", None)
            if record is not None:
                record.fields["error"] = exc.code  # the code only, as for every route
            return json_response({"error": exc.message, "error_type": error_type(exc)}, exc.status, exc.headers)

    return route


def register(app: FastAPI, state: ServerState) -> None:
    routes: dict[tuple[str, str], Handler] = {
        ("POST", "/embed"): embed,
        ("POST", "/"): embed,
        ("POST", "/embed_all"): embed_all,
        ("POST", "/tokenize"): tokenize,
        ("POST", "/decode"): decode,
        ("POST", "/similarity"): similarity,
        ("GET", "/info"): info,
    }
    for (method, path), handler in routes.items():
        app.add_api_route(path, tei_errors(handler, state), methods=[method])
    # Like /v1/*: Bearer auth, the drain gate, the in-flight count and the access log line.
    state.api_paths.update(path for _, path in routes)


async def read_json(request: Request, st: ServerState, *, flatten: bool = True) -> dict[str, Any]:
    raw = load_json_object(await read_body(request, st.config.max_body_bytes, st.config.body_timeout_s))
    if flatten and isinstance(raw.get("parameters"), dict):
        # Hugging Face's generic task shape nests the options: {"inputs": …, "parameters": {…}}.
        raw = {**raw["parameters"], **{k: v for k, v in raw.items() if k != "parameters"}}
    return raw


def limits(st: ServerState) -> int:
    return st.config.max_inputs_per_request


async def embed(request: Request, st: ServerState) -> Response:
    req = validate_body(EmbedBody, await read_json(request, st), unions=INPUTS)
    texts = texts_from(req.inputs, max_inputs=limits(st), field="inputs")
    rt = st.route(req.model, TASK)
    dim = rt.model.output.shape[0]
    if req.dimensions is not None:
        check_dimensions(req.dimensions, dim)
    truncate = st.config.truncate if req.truncate is None else req.truncate
    if not req.normalize and rt.model.output.unit_norm:
        # The pooled path returns unit vectors; the raw mean needs the token states.
        prepared, *_ = await tokenize_checked(request, rt, texts, truncate=truncate, direction=req.direction)
        states = await token_states(rt, prepared, st.config.max_batch_size)
        vectors = np.stack([s.mean(axis=0) for s in states])  # (n, dim)
    else:
        done = await embed_texts(request, st, rt, texts, truncate=truncate, direction=req.direction)
        done.finish()
        vectors = done.vectors
        if req.normalize and not rt.model.output.unit_norm:
            vectors = shorten(vectors, dim, renormalize=True)
    if req.dimensions is not None:
        vectors = shorten(vectors, req.dimensions, renormalize=req.normalize)
    return json_response(vectors.astype(np.float32, copy=False))


async def embed_all(request: Request, st: ServerState) -> Response:
    req = validate_body(EmbedAllBody, await read_json(request, st), unions=INPUTS)
    texts = texts_from(req.inputs, max_inputs=limits(st), field="inputs")
    rt = st.route(req.model, TASK)
    truncate = st.config.truncate if req.truncate is None else req.truncate
    prepared, *_ = await tokenize_checked(request, rt, texts, truncate=truncate, direction=req.direction)
    return json_response(await token_states(rt, prepared, st.config.max_batch_size))  # n × (L_i, dim)


_next_worker = itertools.count()


async def token_states(rt: ModelRuntime, prepared: Prepared, chunk: int) -> list[np.ndarray]:
    """Every real token's last hidden state, one (L_i, dim) array per input, computed on the
    model's worker threads between their batches (a backend is never shared between threads),
    ``chunk`` inputs per call so that a big request neither holds a worker long nor pads
    everything to its longest input."""
    model = rt.model
    states_name = getattr(model.postprocessor, "states", None)
    if states_name is None:  # TEI answers 424 for an operation the model type cannot do
        raise APIError(
            424,
            f"model '{model.name}' does not expose token states",
            type="server_error",
            code="unsupported_operation",
            param=None,
        )

    def run(worker: int, payloads: list[Any], lengths: list[int]) -> list[np.ndarray]:
        feeds = model.preprocessor.collate(payloads, max(lengths))
        mask = feeds["attention_mask"]  # (B, T)
        hidden = np.asarray(model.backends[worker].run(feeds)[states_name], dtype=np.float32)
        hidden = hidden.reshape(*mask.shape, -1)  # (B, T, C): the NumPy engine returns (B*T, C)
        return [hidden[i, :n] for i, n in enumerate(lengths)]

    jobs: list[asyncio.Future[Any]] = []  # run_exclusive is typed Future[object]
    for start in range(0, len(prepared.lengths), chunk):
        worker = next(_next_worker) % model.workers
        part = functools.partial(
            run, worker, prepared.payloads[start : start + chunk], prepared.lengths[start : start + chunk]
        )
        jobs.append(asyncio.wrap_future(rt.scheduler.run_exclusive(part, worker=worker)))
    results: list[list[np.ndarray]] = await asyncio.gather(*jobs)
    return [row for rows in results for row in rows]


async def tokenize(request: Request, st: ServerState) -> Response:
    req = validate_body(TokenizeBody, await read_json(request, st), unions=INPUTS)
    texts = texts_from(req.inputs, max_inputs=limits(st), field="inputs")
    rt = st.route(req.model, TASK)
    request.state.record.fields["model"] = rt.model.name  # the metrics' model label
    tokenizer = text_tokenizer(rt)
    if sum(len(t) for t in texts) <= INLINE_TOKENIZE_CHARS:
        out = tokens_of(tokenizer, texts, rt.model.max_length, req.add_special_tokens)
    else:  # offsets cost a second, per-word encoding: keep big requests off the event loop
        out = await asyncio.to_thread(tokens_of, tokenizer, texts, rt.model.max_length, req.add_special_tokens)
    return json_response(out)


def tokens_of(
    tokenizer: Any, texts: list[str], max_length: int, add_special_tokens: bool
) -> list[list[dict[str, Any]]]:
    """TEI's ``SimpleToken`` lists: id, token text, special, character offsets into the input."""
    from openhood.tokenizer.offsets import token_offsets

    spec = tokenizer.spec
    n_prefix, n_suffix = len(spec.prefix_ids), len(spec.suffix_ids)
    out = []
    for text in texts:
        try:
            ids = tokenizer.encode(text, max_length=max_length)
        except ValueError as exc:
            raise APIError(400, f"input could not be tokenized: {exc}", code="invalid_text", param="inputs") from exc
        spans = token_offsets(tokenizer, text, ids)
        pieces = tokenizer.convert_ids_to_tokens(ids)
        tokens = [
            {
                "id": int(i),
                "text": piece,
                "special": span is None and (k < n_prefix or k >= len(ids) - n_suffix),
                "start": span[0] if span else None,
                "stop": span[1] if span else None,
            }
            for k, (i, piece, span) in enumerate(zip(ids.tolist(), pieces, spans, strict=True))
        ]
        if not add_special_tokens:
            tokens = tokens[n_prefix : len(tokens) - n_suffix]
        out.append(tokens)
    return out


def text_tokenizer(rt: ModelRuntime) -> Any:
    tokenizer = getattr(rt.model.preprocessor, "tokenizer", None)
    if tokenizer is None:
        raise APIError(
            424,
            f"model '{rt.model.name}' has no text tokenizer",
            type="server_error",
            code="unsupported_operation",
            param=None,
        )
    return tokenizer


async def decode(request: Request, st: ServerState) -> Response:
    req = validate_body(
        DecodeBody, await read_json(request, st), unions={"ids": "an array of token ids or an array of such arrays"}
    )
    rows: list[list[int]] = [req.ids] if req.ids and isinstance(req.ids[0], int) else req.ids  # type: ignore[assignment]
    if len(rows) > limits(st):
        raise APIError(
            413,
            f"'ids' has {len(rows)} sequences; at most {limits(st)} per request",
            code="too_many_inputs",
            param="ids",
        )
    rt = st.route(req.model, TASK)
    request.state.record.fields["model"] = rt.model.name  # the metrics' model label
    tokenizer = text_tokenizer(rt)
    out = []
    for k, row in enumerate(rows):
        try:
            out.append(tokenizer.decode(row, skip_special_tokens=req.skip_special_tokens))
        except ValueError as exc:
            raise APIError(422, f"ids[{k}]: {exc}", code="invalid_token_id", param="ids") from exc
    return json_response(out)


async def similarity(request: Request, st: ServerState) -> Response:
    req = validate_body(SimilarityBody, await read_json(request, st, flatten=False), unions={})
    params = req.parameters
    sentences = texts_from(req.inputs.sentences, max_inputs=limits(st), field="sentences")
    texts = [*texts_from(req.inputs.source_sentence, max_inputs=1, field="source_sentence"), *sentences]
    rt = st.route(req.model, TASK)
    truncate = st.config.truncate if params is None or params.truncate is None else params.truncate
    direction = "right" if params is None else params.truncation_direction.lower()
    done = await embed_texts(request, st, rt, texts, truncate=truncate, direction=direction)
    done.finish()
    unit = shorten(done.vectors, done.vectors.shape[1], renormalize=True).astype(np.float64)  # (n, dim)
    return json_response((unit[1:] @ unit[0]).astype(np.float32))  # cosine of each sentence to the source


async def info(request: Request, st: ServerState) -> Response:
    """TEI's ``Info`` for the first embedding model, plus openhood's facts (no secret: the API key,
    paths and environment never appear)."""
    runtimes = [rt for rt in st.runtimes.values() if rt.model.task == TASK]
    rt = st.route(None, TASK)  # the first embedding model
    config = st.config
    precision = rt.model.info.get("precision", config.precision)
    payload = {
        "model_id": rt.model.name,
        "model_sha": None,
        "model_dtype": DTYPES.get(precision, precision),
        "model_type": {"embedding": {"pooling": "mean"}},
        "max_concurrent_requests": config.max_queue,
        "max_input_length": rt.model.max_length,
        "max_batch_tokens": rt.scheduler.max_batch_tokens,
        "max_batch_requests": config.max_batch_size,
        "max_client_batch_size": config.max_inputs_per_request,
        "auto_truncate": config.truncate,
        "tokenization_workers": 1,
        "version": openhood.__version__,
        "sha": None,
        "docker_label": None,
        # openhood's additions
        "task": rt.model.task,
        "backend": rt.model.info.get("backend", config.backend),
        "precision": precision,
        "dim": rt.model.output.shape[0],
        "payload_limit": config.max_body_bytes,
        "models": [r.model.name for r in runtimes],
    }
    return json_response(payload)
