"""What ``/openapi.json`` says about ``POST /v1/images/classify`` and ``/v1/images/embeddings``.

Documentation only (see ``openapi``): the route parses by hand (``routes.images``). It takes a
JSON body (``ImagesBody``: base64 or ``data:`` URLs) or ``multipart/form-data`` (file parts, or
parts named ``image``/``images``/``file``, plus ``model`` and ``top_k`` fields); both are
described, one schema each. Limits that depend on the model or the flags (``top_k`` ≤ classes,
images per request, pixels, bytes) are left to the answers (400 / 413 naming the field); an
undecodable image is 415 or 422.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from openhood.server.openapi import ERRORS, json_body, request_body, responses
from openhood.server.openapi_classify import ScoredLabel

# One image in a JSON body: base64 of the file (``format: byte``, so the fuzz run sends decodable
# base64 of arbitrary bytes and reaches the image decoder), or a data: URL carrying it.
IMAGE_STRING: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "format": "byte", "contentEncoding": "base64"},
        {"type": "string", "pattern": "^data:[^,]*;base64,"},
    ]
}


class ImagesBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    images: list[Annotated[str, WithJsonSchema(IMAGE_STRING)]] = Field(
        min_length=1, description="base64 image files, or data:image/…;base64,… URLs"
    )
    top_k: int = Field(default=5, ge=1, description="labels per image (classify only)")


class ImageLabels(BaseModel):
    index: int
    labels: list[ScoredLabel]


class ImageClassifyResponse(BaseModel):
    object: str
    model: str
    data: list[ImageLabels]


class ImageEmbedding(BaseModel):
    object: str
    index: int
    embedding: list[float]


class ImageEmbeddingsResponse(BaseModel):
    object: str
    model: str
    data: list[ImageEmbedding]


MULTIPART: dict[str, Any] = {
    "type": "object",
    "properties": {
        "images": {"type": "array", "items": {"type": "string", "format": "binary"}, "minItems": 1},
        "model": {"type": "string"},
        "top_k": {"type": "integer", "minimum": 1},
    },
    "required": ["images"],
}
IMAGE_ERRORS = {**ERRORS, 415: "not an image this server decodes"}

# A raw body is one image; its `model` and `top_k` come from the query string.
RAW_IMAGE = {"schema": {"type": "string", "format": "binary"}}
IMAGES_REQUEST = request_body(
    {"application/json": json_body(ImagesBody), "multipart/form-data": MULTIPART, "image/*": RAW_IMAGE}
)
IMAGE_CLASSIFY_RESPONSES = responses(ImageClassifyResponse, "the top labels of each image, in order", IMAGE_ERRORS)
IMAGE_EMBEDDINGS_RESPONSES = responses(ImageEmbeddingsResponse, "one feature vector per image, in order", IMAGE_ERRORS)
