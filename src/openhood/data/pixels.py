"""Image bytes → a normalized (H, W, 3) float32 crop, the way an ImageNet classifier expects it.

Steps, with Pillow: decode; apply the EXIF orientation (a phone photo taken upright is stored
sideways plus a tag); bring any mode to 8-bit RGB (greyscale is replicated, CMYK converted,
16-bit greyscale scaled, alpha composited over white so transparent areas do not turn into
whatever colour the encoder left under them); resize so the short side is ``spec.resize``
with the model's filter; take the centre ``spec.crop`` square; subtract the mean and divide
by the std per channel. The output is channels last, the engine's layout.

The trade-off: one full-size decode per image (no reduced-size JPEG draft decoding), so the
pixels are the same whatever the JPEG's size; the parity fixtures depend on that.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR,
            "lanczos": Image.Resampling.LANCZOS, "nearest": Image.Resampling.NEAREST}


@dataclass(frozen=True)
class PixelSpec:
    resize: int  # short side after resizing
    crop: int  # centre square
    mean: tuple[float, float, float]  # on the 0-255 scale
    std: tuple[float, float, float]
    resample: str = "bicubic"

    @classmethod
    def from_config(cls, pre: dict) -> "PixelSpec":
        return cls(int(pre["resize_short_side"]), int(pre["crop"]), tuple(pre["mean"]), tuple(pre["std"]), pre.get("resample", "bicubic"))


def to_rgb(im: Image.Image) -> Image.Image:
    """Any Pillow mode → 8-bit RGB, EXIF orientation applied, alpha composited over white."""
    im = ImageOps.exif_transpose(im)
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):  # 16/32-bit greyscale: scale to 8 bits
        a = np.asarray(im, dtype=np.float64)
        top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        im = Image.fromarray(np.clip(a * (255.0 / top) + 0.5, 0, 255).astype(np.uint8), "L")
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")


def resize_and_crop(im: Image.Image, spec: PixelSpec) -> np.ndarray:
    """RGB image → (crop, crop, 3) uint8: short side to ``spec.resize``, then the centre square."""
    w, h = im.size
    scale = spec.resize / min(w, h)
    size = (max(spec.crop, round(w * scale)), max(spec.crop, round(h * scale)))
    im = im.resize(size, RESAMPLE[spec.resample])
    left, top = (size[0] - spec.crop) // 2, (size[1] - spec.crop) // 2
    return np.asarray(im.crop((left, top, left + spec.crop, top + spec.crop)), dtype=np.uint8)


def normalize(crop: np.ndarray, spec: PixelSpec) -> np.ndarray:
    """(H, W, 3) uint8 → float32 (x - mean) / std per channel."""
    mean = np.asarray(spec.mean, dtype=np.float32)
    inv_std = np.float32(1.0) / np.asarray(spec.std, dtype=np.float32)
    return (crop.astype(np.float32) - mean) * inv_std


def preprocess_bytes(data: bytes, spec: PixelSpec) -> np.ndarray:
    """Encoded image → (crop, crop, 3) float32 model input."""
    with Image.open(io.BytesIO(data)) as im:
        return normalize(resize_and_crop(to_rgb(im), spec), spec)
