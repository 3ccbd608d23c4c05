"""Parse and validate a ``POST /v1/embeddings`` body (OpenAI's request shape) into plain values.

Two layers, two statuses: the JSON *shape* (field types, unknown ``encoding_format``) is a
pydantic model and fails with 422; the *content* of ``input`` (empty, non-string items, token-id
lists, too many items) is checked by hand and fails with 400 naming the index, like OpenAI does.
The body is decoded with orjson from bytes the caller already size-checked. Error messages never
echo the input (pydantic's ``input`` field of an error is dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

from openhood.corpus import EMPTY_TEXT_CODE, blank_text
from openhood.server.errors import APIError, bad_request


class EmbeddingsBody(BaseModel):
    # Unknown fields are ignored: OpenAI clients send e.g. `user`, and new SDK fields must not break us.
    model_config = ConfigDict(extra="ignore")

    input: StrictStr | list[Any]
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    truncate: StrictBool | None = None  # openhood extension: False → 413 instead of truncating


@dataclass(frozen=True)
class EmbeddingsRequest:
    texts: list[str]
    model: str | None
    encoding_format: str
    truncate: bool | None
    dimensions: int | None  # checked against the routed model's width by the route


def _type_name(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def parse_embeddings_request(body: bytes, *, max_inputs: int) -> EmbeddingsRequest:
    raw = load_json_object(body)
    parsed = validate_body(EmbeddingsBody, raw)
    texts = texts_from(parsed.input, max_inputs=max_inputs)
    return EmbeddingsRequest(texts, parsed.model, parsed.encoding_format, parsed.truncate, parsed.dimensions)


Body = TypeVar("Body", bound=BaseModel)


TEXT_UNION = "a string or an array of strings"


def validate_body(cls: type[Body], raw: dict[str, Any], unions: dict[str, str] | None = None) -> Body:
    """A JSON object → ``cls``, or 422 naming the first bad field (never echoing its value).
    ``unions``: field → what it must be, for union fields (pydantic's per-member messages would
    only confuse)."""
    unions = {"input": TEXT_UNION} if unions is None else unions
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else None
        if field in unions and len(first["loc"]) <= 2:
            message = f"'{field}' must be {unions[field]}, got {_type_name(raw.get(field))}"
        else:
            message = f"invalid field '{'.'.join(str(p) for p in first['loc'])}': {first['msg']}"
        raise APIError(422, message, code="invalid_schema", param=field) from exc


def load_json_object(body: bytes) -> dict[str, Any]:
    """Bytes → a JSON object, or 400 (not JSON) / 422 (JSON, but not an object)."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise APIError(
            400, f"request body is not valid JSON: {exc.msg} at byte {exc.pos}", code="invalid_json", param=None
        ) from exc
    if not isinstance(raw, dict):
        raise APIError(
            422, f"request body must be a JSON object, got {_type_name(raw)}", code="invalid_schema", param=None
        )
    return raw


def schema_error(message: str, param: str | None) -> APIError:
    """422 ``invalid_schema``: a body or field of the wrong type or shape (every route's code)."""
    return APIError(422, message, code="invalid_schema", param=param)


def count_checked(count: int, max_inputs: int, field: str = "input") -> None:
    """400 ``empty_input`` for no items, 413 ``too_many_inputs`` past the per-request limit:
    the same answer on every route that takes a list of inputs."""
    if not count:
        raise bad_request(f"'{field}' must not be an empty list", code="empty_input", param=field)
    if count > max_inputs:
        raise APIError(
            413,
            f"'{field}' has {count} items; at most {max_inputs} per request (split it into several requests)",
            code="too_many_inputs",
            param=field,
        )


def texts_from(value: str | list[Any], *, max_inputs: int, field: str = "input") -> list[str]:
    """A string or array of strings → the list of texts; 400 naming the index for empty, non-string
    or token-id items, 413 naming the limit for more than ``max_inputs`` items."""
    texts = [value] if isinstance(value, str) else value
    count_checked(len(texts), max_inputs, field)
    if all(type(x) is int for x in texts) or all(
        isinstance(x, list) and x and all(type(t) is int for t in x) for x in texts
    ):
        raise bad_request(
            "token-id input is not supported (ids of other tokenizers do not mean anything to this "
            "model); send the text as strings",
            code="token_ids_unsupported",
            param=field,
        )
    for i, item in enumerate(texts):
        if not isinstance(item, str):
            raise bad_request(
                f"{field}[{i}] must be a string, got {_type_name(item)}", code="invalid_input_type", param=field
            )
        if (kind := blank_text(item)) is not None:
            # Refused like OpenAI refuses "" (400) and as sglang refuses blank input (docs/server.md).
            what = f"'{field}'" if isinstance(value, str) else f"{field}[{i}]"
            raise bad_request(f"{what} is {kind}; every input must contain text", code=EMPTY_TEXT_CODE, param=field)
    return texts
