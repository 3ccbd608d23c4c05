"""Small generated images for the data tests: smooth "photo-like" content, any size/format."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def photo(w: int, h: int, seed: int = 0) -> np.ndarray:
    """uint8 (h, w, 3): gradients plus a few soft blobs, so JPEG and resampling behave as on photos."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), (x + y) / max(w + h - 2, 1)], axis=-1) * 160
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.3) * min(w, h)
        colour = rng.uniform(0, 95, size=3)
        img += np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None] * colour
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr_or_img, fmt: str = "JPEG", **save) -> bytes:
    img = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def jpeg(w: int, h: int, quality: int = 90, seed: int = 0, **save) -> bytes:
    return encode(photo(w, h, seed), "JPEG", quality=quality, **save)


def with_orientation(arr: np.ndarray, orientation: int) -> bytes:
    """A JPEG of arr whose EXIF says to display it with the given orientation (1–8)."""
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = orientation
    return encode(img, "JPEG", quality=95, exif=exif.tobytes())
