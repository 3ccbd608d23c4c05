"""What ``/openapi.json`` says about ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Documentation only (see ``openapi``): the request bodies are the parser's own ``ChatBody`` and
``CompletionBody``, so the description cannot drift from what is accepted; the response models
are the non-streaming ``chat.completion`` / ``text_completion`` objects the route writes. With
``"stream": true`` the 200 answer is ``text/event-stream`` (OpenAI's ``data: {chunk}`` lines and
``data: [DONE]``), described event by event (OpenAPI 3.1 reads an event stream's ``schema`` as one
event's): ``data`` is ``[DONE]`` or a JSON chunk, tied to its model by ``contentSchema``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from openhood.server.completion_schemas import ChatBody, CompletionBody
from openhood.server.openapi import ErrorBody, json_body, request_body, responses


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    system_fingerprint: None


class TextChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: Literal["stop", "length"]


class TextCompletion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: CompletionUsage
    system_fingerprint: None


class Delta(BaseModel):
    role: Literal["assistant"] | None = None  # the first chunk's only
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: None
    finish_reason: Literal["stop", "length"] | None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: None
    choices: list[ChatChunkChoice]  # empty in the usage chunk
    usage: CompletionUsage | None = None  # present (null until the last chunk) with stream_options.include_usage


class TextChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: Literal["stop", "length"] | None


class TextCompletionChunk(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: None
    choices: list[TextChunkChoice]
    usage: CompletionUsage | None = None


def event_stream(chunk: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """The ``text/event-stream`` entry of a 200: in OpenAPI 3.1 its ``schema`` describes one event,
    whose ``data`` is ``[DONE]`` or a JSON ``chunk`` (or an error body when generation fails
    mid-stream)."""
    payload = {"anyOf": [json_body(chunk), json_body(ErrorBody)]}
    data = {
        "anyOf": [
            {"const": "[DONE]"},
            {"type": "string", "contentMediaType": "application/json", "contentSchema": payload},
        ]
    }
    event = {"type": "object", "properties": {"data": data}, "required": ["data"]}
    return {"text/event-stream": {"schema": event}}


CHAT_REQUEST = request_body({"application/json": json_body(ChatBody)})
CHAT_RESPONSES = responses(
    ChatCompletion, "the assistant's reply (JSON), or its event stream", other_content=event_stream(ChatCompletionChunk)
)
COMPLETION_REQUEST = request_body({"application/json": json_body(CompletionBody)})
COMPLETION_RESPONSES = responses(
    TextCompletion,
    "the prompt's continuation (JSON), or its event stream",
    other_content=event_stream(TextCompletionChunk),
)
