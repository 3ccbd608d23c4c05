"""Image bytes → model pixels: decode, orient, resize the short side, centre-crop, normalise.

The contract every image model and the decode pool share:

    decode(bytes)            -> uint8 (H, W, 3) RGB, EXIF orientation applied
    preprocess(bytes, spec)  -> uint8 (crop, crop, 3)
    normalize(batch, spec)   -> float32 (N, 3, crop, crop)  (or NHWC, per spec.layout)
    decode_cost(bytes, spec) -> bytes preprocess holds at its peak, read from the header alone

Trade-offs made here:
- Pixels stay uint8 until the batch is formed: a 224² crop is 150 KB as uint8 and 600 KB as
  float32, so workers and shared-memory slots move 4× fewer bytes; normalisation happens once
  per batch, vectorised, in the consumer.
- Geometry follows torchvision's ``Resize(short)`` + ``CenterCrop(crop)`` on PIL images (the
  long side is truncated with ``int()``, the crop offset is rounded) so that reference logits
  made with PyTorch preprocessing match ours pixel for pixel.
- Alpha is composited on WHITE (what a browser shows for a transparent PNG), not dropped:
  dropping alpha exposes whatever colour the encoder left under transparent pixels.
- ``ImageSpec.draft`` turns on libjpeg's reduced-size DCT decoding (Pillow's ``draft``): a
  1080p JPEG decoded at 1/4 scale costs a fraction of the full decode. The DCT downscale is a
  different low-pass filter from Pillow's antialiased resize, so pixels differ slightly; it is
  off unless the model's config turns it on after checking top-1 parity.
- Baseline and progressive JPEGs in RGB or greyscale (nearly every photo) decode through
  simplejpeg; everything else (CMYK JPEG, PNG, WebP, ...) through Pillow. Both wrap
  libjpeg-turbo and produce identical pixels (tested against ``decode_reference``, the Pillow
  path); simplejpeg is ~1.4× faster on a 1080p JPEG because it skips Pillow's chunked decoder
  and its copy out of Pillow's image memory.
- Images that are not simplejpeg's go from Pillow's decoded image straight to the resize, never
  through a full-size NumPy array (identical pixels, a third of the peak memory); ``decode_cost``
  states each path's peak per pixel, so a server can budget memory before decoding. Reduced-size
  decoding (``draft``, Pillow's ``reduce``) would save more but changes pixels, so it stays opt-in.
- Decompression bombs are refused from the header (Pillow's ``open`` reads only the header),
  before a single scan line is decoded.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import simplejpeg
from PIL import Image, ImageOps, UnidentifiedImageError

# Larger than any camera photo we expect (8K is 33 Mpx) and below Pillow's own bomb threshold
# (Image.MAX_IMAGE_PIXELS, ~89 Mpx), so Pillow never warns before our typed error fires.
MAX_PIXELS = 64_000_000

_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_LAYOUTS = ("NCHW", "NHWC")
_ORIENTATION = 0x0112  # EXIF tag


class ImageError(ValueError):
    """Base of the decode errors; the server maps each subclass to its own HTTP status."""


class NotAnImage(ImageError):
    """The bytes are not in any image format we can read (HTTP 415)."""


class CorruptImage(ImageError):
    """A recognised format whose data is corrupt or truncated (HTTP 422)."""


class ImageTooLarge(ImageError):
    """The header declares more pixels than allowed (HTTP 413); nothing was decoded."""


@dataclass(frozen=True)
class ImageSpec:
    """How one model wants its pixels. Every value comes from the model's config.

    resize_short: the short side is resized to this before cropping (torchvision ``Resize(int)``).
    crop: side of the square centre crop, the model's input size.
    mean, std: per-channel RGB statistics on the 0–1 scale, e.g. ImageNet's.
    resample: "nearest" | "bilinear" | "bicubic" | "lanczos".
    layout: "NCHW" or "NHWC" for ``normalize``'s output.
    draft: use libjpeg's reduced-size DCT decoding when the source is ≥ 2× the target.
    """

    resize_short: int
    crop: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resample: str
    layout: str = "NCHW"
    draft: bool = False

    def __post_init__(self):
        if not 0 < self.crop <= self.resize_short:
            raise ValueError(f"need 0 < crop <= resize_short, got crop={self.crop} resize_short={self.resize_short}")
        if self.resample not in _RESAMPLE:
            raise ValueError(f"resample must be one of {sorted(_RESAMPLE)}, got {self.resample!r}")
        if self.layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {_LAYOUTS}, got {self.layout!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("mean and std need three values each, std > 0")

    @property
    def shape(self) -> tuple[int, int, int]:
        """Shape of one preprocessed image: (crop, crop, 3) uint8."""
        return (self.crop, self.crop, 3)


def open_checked(data: bytes, *, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Open from the header only and refuse bombs; the pixels are not decoded yet."""
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError as e:
        raise NotAnImage("not a recognised image format") from e
    except Image.DecompressionBombError as e:
        raise ImageTooLarge(str(e)) from e
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        # Recognised magic bytes but an unreadable header.
        raise CorruptImage(f"unreadable image header: {e}") from e
    w, h = img.size
    if w <= 0 or h <= 0:
        raise CorruptImage(f"image header declares an empty size {w}x{h}")
    if w * h > max_pixels:
        raise ImageTooLarge(f"image is {w}x{h} = {w * h:,} pixels, more than the {max_pixels:,} allowed")
    return img


def decode(
    data: bytes, *, max_pixels: int = MAX_PIXELS, draft_short: int | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Bytes → uint8 (H, W, 3) RGB with EXIF orientation applied.

    draft_short: if given and the image is a JPEG at least twice that size on its short side,
    libjpeg decodes at 1/2, 1/4 or 1/8 scale (Pillow's ``draft`` rule), keeping the short
    side ≥ draft_short.
    out: a flat uint8 buffer (a shared-memory slot, a worker's scratch buffer). When it holds
    H·W·3 bytes the result is a view of it, and an upright JPEG is decoded straight into it
    with no copy; when it is too small a new array is returned.
    """
    img = open_checked(data, max_pixels=max_pixels)
    if not _simplejpeg_path(img):
        return _into(np.asarray(_pillow_decode(img, draft_short)), out)
    return _decode_jpeg(data, img, draft_short, out)


def _simplejpeg_path(img: Image.Image) -> bool:
    """Whether ``decode`` reads this image with simplejpeg (baseline/progressive RGB or grey JPEG)."""
    return img.format == "JPEG" and img.mode in ("RGB", "L")


def _decode_jpeg(data: bytes, img: Image.Image, draft_short: int | None, out: np.ndarray | None) -> np.ndarray:
    """``decode`` of an image on the simplejpeg path: uint8 (H, W, 3), a view of out when it fits."""
    w, h = img.size
    k = _draft_scale(w, h, draft_short)
    orientation = img.getexif().get(_ORIENTATION, 1)
    ow, oh = -(-w // k), -(-h // k)  # libjpeg's scaled size rounds up
    # Upright and fits: decode straight into out, (oh, ow, 3).
    direct = out[: ow * oh * 3] if out is not None and orientation == 1 and out.size >= ow * oh * 3 else None
    try:
        # libjpeg-turbo straight into an array: bit-identical to Pillow (same library, same
        # islow IDCT and fancy upsampling) without Pillow's chunked decoder and extra copy.
        arr = simplejpeg.decode_jpeg(data, "RGB", min_width=ow, min_height=oh, buffer=direct)
    except ValueError as e:
        raise CorruptImage(f"corrupt or truncated JPEG data: {e}") from e
    if direct is not None:
        return direct.reshape(oh, ow, 3)
    return _into(_orient(arr, orientation), out)


def decode_reference(data: bytes, *, max_pixels: int = MAX_PIXELS, draft_short: int | None = None) -> np.ndarray:
    """``decode`` through Pillow alone (``draft`` + ``load`` + ``exif_transpose``), for tests."""
    return np.asarray(_pillow_decode(open_checked(data, max_pixels=max_pixels), draft_short))


def preprocess(
    data: bytes, spec: ImageSpec, *, max_pixels: int = MAX_PIXELS, scratch: np.ndarray | None = None
) -> np.ndarray:
    """Bytes → uint8 (crop, crop, 3): decode, resize the short side, centre-crop.

    scratch: a flat uint8 buffer reused for the full-size JPEG decode (a worker keeps one), which
    saves allocating and page-faulting a fresh 6–25 MB array per photo (15–30% of the
    preprocess time measured on 1080p–4K JPEGs)."""
    img = open_checked(data, max_pixels=max_pixels)
    check_resized(*img.size, spec, max_pixels)
    draft_short = spec.resize_short if spec.draft else None
    if _simplejpeg_path(img):
        rgb = Image.fromarray(_decode_jpeg(data, img, draft_short, scratch))
    else:
        # Resized straight from Pillow's image: the same pixels as a trip through a NumPy array,
        # without its two full-size copies (a 62-Mpx PNG peaked at 598 MB that way, 248 MB this way).
        rgb = _pillow_decode(img, draft_short)
    return np.asarray(resize_crop(rgb, spec))


def decode_cost(data: bytes, spec: ImageSpec, *, max_pixels: int = MAX_PIXELS) -> int:
    """Bytes that ``preprocess(data, spec)`` holds at its peak, from the header alone (nothing is
    decoded; raises the header's ``ImageError``). What an admission budget reserves per image."""
    img = open_checked(data, max_pixels=max_pixels)
    w, h = img.size
    per_pixel = _peak_bytes_per_pixel(img)
    if _header_orientation(img) != 1:
        per_pixel += 4  # the rotated copy of Pillow's 4-byte pixels beside the original
    # Pillow resizes in two passes: the first leaves (resize_short, long side) 4-byte pixels, the
    # second the resized image (larger than the source for a thin image, which upscales); the
    # crop is smaller still. 2x covers the decoder's row buffers.
    nw, nh = check_resized(w, h, spec, max_pixels)
    return w * h * per_pixel + 2 * 4 * (spec.resize_short * max(w, h) + nw * nh)


def _header_orientation(img: Image.Image) -> int:
    """The EXIF orientation the header declares, without decoding. Pillow's PNG ``getexif`` loads
    the whole image to look for an eXIf chunk after the pixels: such a late chunk is not seen
    here (that rare rotated PNG then peaks at up to 2x its cost)."""
    if img.format == "PNG" and "exif" not in img.info:
        return 1
    return int(img.getexif().get(_ORIENTATION, 1))


def _peak_bytes_per_pixel(img: Image.Image) -> int:
    """Full-size bytes per pixel alive at once in ``preprocess``, by decode path. Pillow keeps
    RGB, RGBA and CMYK as 4 bytes a pixel, L and P as 1."""
    if _simplejpeg_path(img):
        return 3 + 4  # simplejpeg's (H, W, 3) array + the Pillow image resized from it
    if img.mode == "RGB":
        return 4  # decoded and resized in place: the one full-size image
    if img.mode in ("L", "1") or (img.mode == "P" and "transparency" not in img.info):
        return 1 + 4  # the decoded image + its RGB conversion
    if img.mode.startswith(("I", "F")):
        return 32  # 16-bit greyscale rescaled through float64 arrays (_to_rgb)
    return 20  # alpha composited on white (source, RGBA copy, white, result, RGB), CMYK and others


def resized_size(w: int, h: int, spec: ImageSpec) -> tuple[int, int]:
    """torchvision's ``Resize(spec.resize_short)``: the short side becomes ``resize_short``, the
    long side ``int(s * long / short)`` (truncated). A thin image grows: 8x100000 → 256x3200000.

    >>> resized_size(640, 480, ImageSpec(256, 224, (0.5,) * 3, (0.5,) * 3, "bilinear"))
    (341, 256)
    """
    s = spec.resize_short
    return (s, int(s * h / w)) if w <= h else (int(s * w / h), s)


def check_resized(w: int, h: int, spec: ImageSpec, max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """``resized_size``, refused (``ImageTooLarge``) when the resized image would hold more than
    ``max_pixels``: a few-KB image of extreme aspect ratio must not cost gigabytes to resize."""
    nw, nh = resized_size(w, h, spec)
    if nw * nh > max_pixels:
        raise ImageTooLarge(
            f"image is {w}x{h}: resizing its short side to {spec.resize_short} makes {nw}x{nh} = "
            f"{nw * nh:,} pixels, more than the {max_pixels:,} allowed (aspect ratio too extreme)"
        )
    return nw, nh


def resize_crop(img: Image.Image, spec: ImageSpec) -> Image.Image:
    """torchvision ``Resize(spec.resize_short)`` then ``CenterCrop(spec.crop)`` on an RGB image."""
    w, h = img.size
    nw, nh = resized_size(w, h, spec)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), _RESAMPLE[spec.resample])
    c = spec.crop
    top = round((nh - c) / 2.0)
    left = round((nw - c) / 2.0)
    return img.crop((left, top, left + c, top + c))


def normalize(batch: np.ndarray, spec: ImageSpec, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 (N, H, W, 3) → float32 (N, 3, H, W) (or (N, H, W, 3) for NHWC): (x/255 − mean)/std.

    One fused multiply-add per element: scale = 1/(255·std), bias = −mean/std, per channel.
    """
    if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[3] != 3:
        raise ValueError(f"expected uint8 (N, H, W, 3), got {batch.dtype} {batch.shape}")
    scale, bias = _affine(spec)
    x = batch.transpose(0, 3, 1, 2) if spec.layout == "NCHW" else batch
    shape = x.shape
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32:
        raise ValueError(f"out must be float32 {shape}, got {out.dtype} {out.shape}")
    chan = (1, 3, 1, 1) if spec.layout == "NCHW" else (1, 1, 1, 3)
    np.multiply(x, scale.reshape(chan), out=out)  # uint8 × float32 → float32, no uint8 overflow
    out += bias.reshape(chan)
    return out


def normalize_reference(batch: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """The naive formula in float64, for tests: ((x / 255) − mean) / std, then the layout."""
    x = batch.astype(np.float64) / 255.0
    x = (x - np.asarray(spec.mean)) / np.asarray(spec.std)  # (N, H, W, 3)
    if spec.layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(x, dtype=np.float32)


def _affine(spec: ImageSpec) -> tuple[np.ndarray, np.ndarray]:
    std = np.asarray(spec.std, dtype=np.float64)
    scale = (1.0 / (255.0 * std)).astype(np.float32)
    bias = (-np.asarray(spec.mean, dtype=np.float64) / std).astype(np.float32)
    return scale, bias


def _into(arr: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """arr, or a copy of it in the front of the flat buffer out when it fits."""
    if out is None or out.size < arr.size:
        return arr
    view = out[: arr.size].reshape(arr.shape)
    view[...] = arr
    return view


def _draft_scale(w: int, h: int, draft_short: int | None) -> int:
    """Pillow's draft rule: the largest of 8, 4, 2, 1 with both sides still ≥ draft_short."""
    if draft_short is None:
        return 1
    ratio = min(w, h) // draft_short
    return next(k for k in (8, 4, 2, 1) if ratio >= k)


def _orient(arr: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1–8) to (H, W, 3), as Pillow's ``exif_transpose`` does."""
    view = {
        2: lambda a: a[:, ::-1],  # mirrored
        3: lambda a: a[::-1, ::-1],  # upside down
        4: lambda a: a[::-1],  # mirrored upside down
        5: lambda a: a.transpose(1, 0, 2),  # transpose
        6: lambda a: a.transpose(1, 0, 2)[:, ::-1],  # rotated 90° clockwise to display
        7: lambda a: a[::-1, ::-1].transpose(1, 0, 2),  # transverse
        8: lambda a: a.transpose(1, 0, 2)[::-1],  # rotated 90° counter-clockwise to display
    }.get(orientation)
    return arr if view is None else np.ascontiguousarray(view(arr))


def _pillow_decode(img: Image.Image, draft_short: int | None) -> Image.Image:
    try:
        if draft_short is not None and img.format == "JPEG":
            # A square request keeps the short side ≥ draft_short whatever the EXIF rotation.
            img.draft("RGB", (draft_short, draft_short))
        img.load()
        ImageOps.exif_transpose(img, in_place=True)  # in place: no copy when upright
        return _to_rgb(img)
    except Image.DecompressionBombError as e:
        raise ImageTooLarge(str(e)) from e
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, ZeroDivisionError) as e:
        # Pillow reports truncation and bad data through several exception types.
        raise CorruptImage(f"corrupt or truncated {img.format or 'image'} data: {e}") from e


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode → RGB; alpha (RGBA, LA, P with transparency) composited on white."""
    if img.mode == "RGB":
        return img
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        # 16-bit greyscale PNG/TIFF: scale 0–65535 to 0–255 (Pillow's convert("L") clips instead).
        a = np.asarray(img, dtype=np.float64)
        if a.max() > 255:
            a = a / 257.0
        img = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")  # L, 1, CMYK, YCbCr, LAB, HSV
