"""Parse and validate ``POST /v1/chat/completions`` and ``POST /v1/completions`` bodies (OpenAI's shapes).

As for embeddings (``schemas.py``): malformed JSON is 400, a field of the wrong type or out of
its range is 422 naming the field, a value we understand but do not serve is 400 naming it
(``n`` other than 1, several prompts, ``echo``/``suffix``). Every sampling
parameter is checked here, at the route, so nothing a client sends can fail inside the shared
step scheduler: ``seed`` in [0, 2^64), ``temperature`` in [0, 2], ``top_p`` in (0, 1],
``top_k`` ≥ 0, ``max_tokens`` ≥ 1, ``stop`` (≤ 4 non-empty strings), ``logit_bias`` (token id →
[-100, 100]; ids checked against the vocabulary once the model is known), the penalties in
[-2, 2], ``logprobs``/``top_logprobs`` (chat: a bool and 0–20, ``top_logprobs`` only with
``logprobs: true``; completions: OpenAI's legacy ``logprobs`` integer 0–20), ``response_format``'s
type (text, json_object, json_schema; the schema itself is compiled at the route). Unknown fields are ignored (clients send ``user``, …; new SDK fields must not break us).
The trade-off: the penalties are range-checked and then ignored rather than refused, like most
OpenAI-compatible servers, so stock clients work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from openhood.generate.logprobs import MAX_TOP_LOGPROBS
from openhood.server.errors import APIError, bad_request
from openhood.server.schemas import load_json_object, validate_body

MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_SEED = 2**64 - 1  # numpy's generators take any non-negative int; OpenAI's seeds are 64-bit
MAX_LOGIT_BIAS = 100.0  # OpenAI's range is [-100, 100]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: StrictStr | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, strict=True)  # OpenAI's default and range
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, strict=True)
    top_k: StrictInt = Field(default=0, ge=0)  # vLLM's and llama.cpp's extension; 0 = off
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = Field(default=None, ge=0, le=MAX_SEED)
    n: StrictInt = 1
    logit_bias: dict[StrictStr, float] | None = None
    response_format: dict[StrictStr, Any] | None = None  # text, json_object or json_schema (checked below)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, strict=True)  # accepted, ignored
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0, strict=True)  # accepted, ignored


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: StrictStr | list[ContentPart]


class ChatBody(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)  # the newer name of max_tokens
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionBody(_Sampling):
    prompt: StrictStr | list[StrictStr]
    echo: StrictBool = False
    logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)  # legacy: how many alternatives
    suffix: StrictStr | None = None


@dataclass(frozen=True)
class CompletionRequest:
    """A validated request: the prompt (messages or raw text) and its sampling settings."""

    model: str | None
    prompt: str | list[dict[str, str]]  # raw text (/v1/completions) or chat messages
    chat: bool
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    stop: tuple[str, ...]
    seed: int | None
    logit_bias: tuple[tuple[int, float], ...]  # (token id, bias): ids not yet checked against a vocabulary
    logprobs: int | None = None  # None: no logprobs; k: each token's logprob and its k best alternatives
    response_format: dict[str, Any] | None = None  # json_object / json_schema (compiled at the route); None: text


def _common(parsed: _Sampling) -> dict[str, Any]:
    if parsed.n != 1:
        raise APIError(
            400,
            f"'n' must be 1 (one choice per request) on this server, got {parsed.n}",
            code="unsupported_value",
            param="n",
        )
    stop = (parsed.stop,) if isinstance(parsed.stop, str) else tuple(parsed.stop or ())
    if len(stop) > MAX_STOP_STRINGS:
        raise bad_request(
            f"'stop' has {len(stop)} strings; at most {MAX_STOP_STRINGS}", code="too_many_stop", param="stop"
        )
    if any(not s for s in stop):
        raise bad_request("'stop' strings must not be empty", code="empty_stop", param="stop")
    bias = []
    for key, value in (parsed.logit_bias or {}).items():
        if not key.isascii() or not key.isdigit():
            raise APIError(
                422, "'logit_bias' keys must be token ids (decimal strings)", code="invalid_schema", param="logit_bias"
            )
        if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
            raise APIError(
                422,
                f"'logit_bias' values must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]",
                code="invalid_schema",
                param="logit_bias",
            )
        bias.append((int(key), float(value)))
    response_format = parsed.response_format
    if response_format is not None:
        kind = response_format.get("type")
        if kind not in ("text", "json_object", "json_schema"):
            raise bad_request(
                f"'response_format' type must be text, json_object or json_schema, got {kind!r}",
                code="invalid_response_format",
                param="response_format",
            )
        if kind == "json_schema" and not isinstance(response_format.get("json_schema"), dict):
            raise bad_request(
                "'response_format' of type json_schema needs a 'json_schema' object",
                code="invalid_response_format",
                param="response_format",
            )
        if kind == "text":
            response_format = None
    if parsed.stream_options is not None and not parsed.stream:
        raise bad_request(
            "'stream_options' is only allowed with 'stream': true",
            code="invalid_stream_options",
            param="stream_options",
        )
    return {
        "model": parsed.model,
        "stream": parsed.stream,
        "include_usage": bool(parsed.stream_options and parsed.stream_options.include_usage),
        "temperature": parsed.temperature,
        "top_p": parsed.top_p,
        "top_k": parsed.top_k,
        "stop": stop,
        "seed": parsed.seed,
        "logit_bias": tuple(bias),
        "response_format": response_format,
    }


def parse_chat_request(body: bytes) -> CompletionRequest:
    parsed = validate_body(
        ChatBody,
        load_json_object(body),
        unions={"content": "a string or an array of text parts", "stop": "a string or an array of strings"},
    )
    messages = []
    for m in parsed.messages:
        content = m.content if isinstance(m.content, str) else "".join(p.text for p in m.content)
        messages.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    max_tokens = parsed.max_completion_tokens if parsed.max_completion_tokens is not None else parsed.max_tokens
    if parsed.top_logprobs is not None and not parsed.logprobs:
        raise bad_request("'top_logprobs' needs 'logprobs': true", code="invalid_top_logprobs", param="top_logprobs")
    logprobs = (parsed.top_logprobs or 0) if parsed.logprobs else None
    return CompletionRequest(prompt=messages, chat=True, max_tokens=max_tokens, logprobs=logprobs, **_common(parsed))


def parse_completion_request(body: bytes) -> CompletionRequest:
    parsed = validate_body(
        CompletionBody, load_json_object(body), unions={"prompt": "a string", "stop": "a string or an array of strings"}
    )
    prompt = parsed.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise bad_request(
                f"'prompt' must be one string on this server, got an array of {len(prompt)}",
                code="unsupported_value",
                param="prompt",
            )
        prompt = prompt[0]
    if not prompt:
        raise bad_request("'prompt' is an empty string", code="empty_string", param="prompt")
    for name in ("echo", "suffix"):
        if getattr(parsed, name) not in (None, False):
            raise bad_request(f"'{name}' is not supported on this server", code="unsupported_value", param=name)
    return CompletionRequest(
        prompt=prompt, chat=False, max_tokens=parsed.max_tokens, logprobs=parsed.logprobs, **_common(parsed)
    )
