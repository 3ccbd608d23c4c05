"""Request bodies of the TEI-compatible routes (Hugging Face text-embeddings-inference's shapes).

The field names, defaults and types follow TEI's OpenAPI document (``EmbedRequest``,
``TokenizeRequest``, ``DecodeRequest``, ``SimilarityRequest``); ``model`` is openhood's addition
(several models per server; absent = the first embedding model). Shape errors are 422 naming the
field (``schemas.validate_body``), content errors 400/413 (``schemas.texts_from``). TEI spells
the truncation direction ``Left``/``Right`` in its schema and ``left``/``right`` in its defaults;
both are accepted. The trade-off: ``prompt_name`` is accepted only as null, since openhood's
models carry no sentence-transformers prompts (422 otherwise, rather than silently ignoring it).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, field_validator

Direction = Literal["left", "right", "Left", "Right"]


class _TEIBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients add fields (encoding_format, parameters…)

    model: StrictStr | None = None


class _Truncating(_TEIBody):
    truncate: StrictBool | None = None  # None: the server's --truncate default
    truncation_direction: Direction = "right"
    prompt_name: None = None

    @property
    def direction(self) -> str:
        return self.truncation_direction.lower()

    @field_validator("prompt_name", mode="before")
    @classmethod
    def _no_prompts(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("this server's models have no prompts; send null or leave it out")
        return None


class EmbedBody(_Truncating):
    inputs: StrictStr | list[Any]
    normalize: StrictBool = True
    dimensions: StrictInt | None = None


class EmbedAllBody(_Truncating):
    inputs: StrictStr | list[Any]


class TokenizeBody(_TEIBody):
    inputs: StrictStr | list[Any]
    add_special_tokens: StrictBool = True
    prompt_name: None = None


class DecodeBody(_TEIBody):
    ids: list[StrictInt] | list[list[StrictInt]]
    skip_special_tokens: StrictBool = True


class SimilarityInput(BaseModel):
    source_sentence: StrictStr
    sentences: list[StrictStr]


class SimilarityParameters(BaseModel):
    model_config = ConfigDict(extra="ignore")

    truncate: StrictBool | None = None
    truncation_direction: Direction = "right"
    prompt_name: None = None


class SimilarityBody(_TEIBody):
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None
