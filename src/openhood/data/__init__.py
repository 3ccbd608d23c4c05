"""Image decoding and preprocessing (``image``) and the shared-memory decode pool (``pool``)."""

from openhood.data.image import (
    MAX_PIXELS,
    CorruptImage,
    ImageError,
    ImageSpec,
    ImageTooLarge,
    NotAnImage,
    decode,
    normalize,
    preprocess,
)

__all__ = [
    "MAX_PIXELS",
    "CorruptImage",
    "ImageError",
    "ImageSpec",
    "ImageTooLarge",
    "NotAnImage",
    "decode",
    "normalize",
    "preprocess",
]
