"""What ``/openapi.json`` says about ``POST /v1/classify``: documentation only (see ``openapi``).

The route parses its body by hand (``routes.classify.parse``; the feature count and finiteness
are the model's ``FeaturePreprocessor``'s to check), so ``ClassifyBody`` describes the JSON it
accepts without being its parser: a field's type and range here match the hand checks, and the
model-dependent limits (feature count, ``top_k`` ≤ classes, inputs per request) are left to the
answers (422 / 413 naming the field).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from openhood.server.openapi import json_body, request_body, responses


class ClassifyBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: list[list[float] | list[list[float]]] = Field(
        min_length=1, description="feature vectors, or small grey images as lists of rows"
    )
    top_k: int | None = Field(default=None, ge=1, description="also list the k most probable classes")


class ScoredLabel(BaseModel):
    index: int
    label: str
    probability: float


class Classification(BaseModel):
    index: int
    label: str
    probabilities: list[float]
    top_k: list[ScoredLabel] = Field(default_factory=list, description="present when the request asked for top_k")


class ClassifyResponse(BaseModel):
    object: str
    model: str
    data: list[Classification]


CLASSIFY_REQUEST = request_body({"application/json": json_body(ClassifyBody)})
CLASSIFY_RESPONSES = responses(ClassifyResponse, "one classification per input, in order")
