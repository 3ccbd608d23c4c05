"""What ``/openapi.json`` says about the inference routes: documentation only.

The routes read their bodies by hand (size cap first, OpenAI error shapes), so FastAPI cannot
infer a request or response from their signatures. The pydantic models here and in the
``openapi_*`` modules exist to *describe* the contract to clients and to the schemathesis fuzz
run (tests/server/test_fuzz.py), which checks that every answer matches them; validation stays in
the hand parsers. Where a parser is itself a pydantic model (``EmbeddingsBody``, ``ChatBody``,
``CompletionBody``) the description *is* that model, so the two cannot drift. This module holds
the embeddings operation and what every operation shares: the error body, the error table and
``json_body`` (a model's JSON schema with its ``$defs`` inlined, since an ``openapi_extra``
request body cannot point into the document's components).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from openhood.server.schemas import EmbeddingsBody


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    error: ErrorDetail


class Embedding(BaseModel):
    object: str
    index: int
    embedding: list[float] | str  # float list, or base64 of little-endian float32


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: str
    data: list[Embedding]
    model: str
    usage: Usage
    truncated_inputs: list[int]  # openhood extension: indices of inputs cut to the model's max


ERRORS = {
    400: "invalid input (names the field or index)",
    401: "missing or wrong API key",
    404: "model not served here",
    408: "body not received in time",
    413: "body or input too large",
    422: "body has the wrong shape",
    429: "queue full (Retry-After)",
    500: "inference failed (the server keeps serving)",
    503: "draining or cut at the shutdown deadline (Retry-After)",
}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with every ``#/$defs/…`` reference replaced by its definition
    (the parsers' models are not recursive, so this terminates)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**inline(defs[ref.removeprefix("#/$defs/")]), **inline(rest)}
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    result: dict[str, Any] = inline(schema)
    return result


def request_body(content: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose body is read by hand: media type → its schema."""
    return {"requestBody": {"required": True, "content": {kind: {"schema": s} for kind, s in content.items()}}}


def responses(
    ok: type[BaseModel],
    description: str,
    errors: dict[int, str] | None = None,
    other_content: dict[str, dict[str, Any]] | None = None,
) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: 200 → ``ok`` as JSON (plus ``other_content``, media type →
    its entry, e.g. an event stream), each status of ``errors`` (default ``ERRORS``) → ``ErrorBody``."""
    ok_entry: dict[str, Any] = {"model": ok, "description": description}
    if other_content:
        ok_entry["content"] = other_content
    return {
        200: ok_entry,
        **{status: {"model": ErrorBody, "description": why} for status, why in (errors or ERRORS).items()},
    }


EMBEDDINGS_REQUEST = request_body({"application/json": json_body(EmbeddingsBody)})
EMBEDDINGS_RESPONSES = responses(EmbeddingsResponse, "one embedding per input, in order")
