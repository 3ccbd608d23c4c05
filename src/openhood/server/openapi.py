"""What ``/openapi.json`` says about ``POST /v1/embeddings``: documentation only.

The route reads its body by hand (``schemas.parse_embeddings_request``: size cap first, OpenAI
error shapes), so FastAPI cannot infer the request or response from its signature. These
pydantic models exist to *describe* the contract to clients and to the schemathesis fuzz run
(tests/server/test_fuzz.py), which checks that every answer matches them; validation stays in the
hand parser. The request model is the parser's own ``EmbeddingsBody``, so the two cannot drift.
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


_ERRORS = {
    400: "invalid input (names the index)",
    401: "missing or wrong API key",
    404: "model not served here",
    408: "body not received in time",
    413: "body or input too large",
    422: "body has the wrong shape",
    429: "queue full (Retry-After)",
    500: "inference failed (the server keeps serving)",
    503: "draining or cut at the shutdown deadline (Retry-After)",
}

EMBEDDINGS_REQUEST: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": EmbeddingsBody.model_json_schema()}},
    }
}
EMBEDDINGS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": EmbeddingsResponse, "description": "one embedding per input, in order"},
    **{status: {"model": ErrorBody, "description": why} for status, why in _ERRORS.items()},
}
