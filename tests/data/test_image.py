"""The pixel contract: decode (orientation, modes, typed errors, bombs), preprocess geometry,
draft decoding, and the fast normalize against its naive reference."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from openhood.data.image import (
    CorruptImage,
    ImageSpec,
    ImageTooLarge,
    NotAnImage,
    decode,
    decode_cost,
    decode_reference,
    normalize,
    normalize_reference,
    preprocess,
    resize_crop,
)

from .images import encode, jpeg, photo, with_orientation

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def test_png_round_trip_is_exact():
    arr = photo(37, 23)
    out = decode(encode(arr, "PNG"))
    assert out.dtype == np.uint8 and out.shape == (23, 37, 3)
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("orientation, top_colour", [(1, None), (3, None), (6, "red"), (8, "blue")])
def test_exif_orientation_is_applied(orientation, top_colour):
    # 40 wide × 20 high: left half red, right half blue.
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20, 0] = 255
    arr[:, 20:, 2] = 255
    out = decode(with_orientation(arr, orientation))
    if orientation in (6, 8):  # 90° rotations swap the sides
        assert out.shape == (40, 20, 3)
        top = out[5, 10]
        assert (top[0] > 200) == (top_colour == "red") and (top[2] > 200) == (top_colour == "blue")
    else:
        assert out.shape == (20, 40, 3)
        left = out[10, 5]
        assert (left[0] > 200) == (orientation == 1)  # 3 = rotate 180: red ends up on the right


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("draft_short", [None, 16])
def test_fast_jpeg_path_equals_pillow_reference(orientation, draft_short):
    data = with_orientation(photo(70, 45, seed=orientation), orientation)
    fast, ref = decode(data, draft_short=draft_short), decode_reference(data, draft_short=draft_short)
    assert fast.shape == ref.shape
    np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("mode, save", [("RGB", {"progressive": True}), ("L", {}), ("RGB", {"subsampling": 0})])
def test_fast_path_equals_reference_for_progressive_and_greyscale(mode, save):
    data = encode(Image.fromarray(photo(64, 48)).convert(mode), "JPEG", quality=85, **save)
    np.testing.assert_array_equal(decode(data), decode_reference(data))


@pytest.mark.parametrize("orientation", [1, 6])
def test_decode_into_a_buffer(orientation):
    data = with_orientation(photo(50, 30), orientation)
    buf = np.zeros(50 * 30 * 3 + 7, np.uint8)
    got = decode(data, out=buf)
    assert np.shares_memory(got, buf)
    np.testing.assert_array_equal(got, decode_reference(data))
    png = encode(photo(50, 30), "PNG")
    np.testing.assert_array_equal(decode(png, out=buf), decode(png))
    small = np.zeros(100, np.uint8)
    assert not np.shares_memory(decode(data, out=small), small)  # too small: a new array
    spec = ImageSpec(resize_short=20, crop=16, resample="bilinear", **IMAGENET)
    np.testing.assert_array_equal(preprocess(data, spec, scratch=buf), preprocess(data, spec))


def test_greyscale_and_cmyk_become_rgb():
    grey = decode(encode(Image.fromarray(photo(30, 20)).convert("L"), "JPEG"))
    assert grey.shape == (20, 30, 3)
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()
    cmyk = decode(encode(Image.fromarray(photo(30, 20)).convert("CMYK"), "JPEG", quality=95))
    ref = photo(30, 20).astype(int)
    assert cmyk.shape == (20, 30, 3) and np.abs(cmyk.astype(int) - ref).mean() < 8


def test_alpha_is_composited_on_white():
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200  # red under everything
    rgba[:2, :, 3] = 0  # top half fully transparent
    rgba[2:, :, 3] = 255
    out = decode(encode(rgba, "PNG"))
    assert (out[:2] == 255).all()  # white, not the hidden red
    assert (out[2:] == [200, 0, 0]).all()
    la = Image.fromarray(np.stack([np.full((4, 4), 10, np.uint8), np.zeros((4, 4), np.uint8)], -1), "LA")
    assert (decode(encode(la, "PNG")) == 255).all()
    pal = Image.new("P", (3, 3), 1)
    pal.putpalette([0, 0, 0, 9, 9, 9] + [0] * 762)
    assert (decode(encode(pal, "PNG", transparency=1)) == 255).all()


def test_sixteen_bit_greyscale_is_scaled_not_clipped():
    a = np.full((3, 3), 65535, np.uint16)
    a[0, 0] = 257 * 100
    out = decode(encode(Image.fromarray(a), "PNG"))
    assert out[1, 1].tolist() == [255] * 3 and out[0, 0].tolist() == [100] * 3


def test_typed_errors():
    with pytest.raises(NotAnImage):
        decode(b"hello, this is text not an image")
    with pytest.raises(NotAnImage):
        decode(b"")
    data = jpeg(64, 64)
    with pytest.raises(CorruptImage):
        decode(data[: len(data) // 2])
    with pytest.raises(ImageTooLarge, match="4,096"):
        decode(data, max_pixels=4095)
    assert decode(data, max_pixels=4096).shape == (64, 64, 3)


def _png_header_only(w: int, h: int) -> bytes:
    """A PNG whose IHDR declares w×h followed by 16 bytes of compressed zeros: far too few rows."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(16))) + chunk(b"IEND", b"")


@pytest.mark.parametrize("w, h", [(20_000, 20_000), (100_000, 100_000)])
def test_bomb_is_refused_from_the_header(w, h):
    # Almost no pixel data: were the pixels decoded, this would be CorruptImage, not ImageTooLarge.
    with pytest.raises(ImageTooLarge):
        decode(_png_header_only(w, h))


def test_preprocess_geometry_matches_torchvision_resize_centercrop():
    # 240×160 with R = x, G = y; resize_short 80 → 120×80 (exact halving), crop 60 → left 30, top 10.
    y, x = np.mgrid[0:160, 0:240]
    arr = np.stack([x, y, np.zeros_like(x)], -1).astype(np.uint8)
    spec = ImageSpec(resize_short=80, crop=60, resample="nearest", **IMAGENET)
    out = preprocess(encode(arr, "PNG"), spec)
    assert out.shape == spec.shape == (60, 60, 3)
    assert out[0, 0, 0] in (60, 61) and out[0, 0, 1] in (20, 21)
    assert out[0, 59, 0] in (178, 179) and out[59, 0, 1] in (138, 139)
    # Portrait: the long side is truncated like torchvision's int(s * long / short).
    tall = preprocess(
        encode(photo(99, 301), "PNG"), ImageSpec(resize_short=50, crop=50, resample="bilinear", **IMAGENET)
    )
    assert tall.shape == (50, 50, 3)


def test_draft_decodes_at_reduced_scale_and_stays_close():
    data = jpeg(1600, 1200, quality=90)
    assert decode(data, draft_short=256).shape == (300, 400, 3)  # 1/4 scale: min(1600//256, 1200//256) = 4
    assert decode(data, draft_short=700).shape == (1200, 1600, 3)  # 1200 // 700 = 1: no reduction
    full = ImageSpec(resize_short=256, crop=224, resample="bilinear", **IMAGENET)
    drafted = ImageSpec(resize_short=256, crop=224, resample="bilinear", draft=True, **IMAGENET)
    a, b = preprocess(data, full), preprocess(data, drafted)
    assert a.shape == b.shape == (224, 224, 3)
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 2.0


def test_draft_ignores_non_jpeg():
    assert decode(encode(photo(800, 600), "PNG"), draft_short=100).shape == (600, 800, 3)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_normalize_matches_reference(layout):
    spec = ImageSpec(resize_short=8, crop=8, resample="bilinear", layout=layout, **IMAGENET)
    batch = np.random.default_rng(0).integers(0, 256, size=(3, 8, 8, 3), dtype=np.uint8)
    batch[0, 0, 0] = [0, 255, 128]
    got = normalize(batch, spec)
    want = normalize_reference(batch, spec)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.shape == ((3, 3, 8, 8) if layout == "NCHW" else (3, 8, 8, 3))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    out = np.empty_like(want)
    assert normalize(batch, spec, out=out) is out


def test_normalize_and_spec_refuse_bad_input():
    spec = ImageSpec(resize_short=8, crop=8, resample="bilinear", **IMAGENET)
    with pytest.raises(ValueError):
        normalize(np.zeros((1, 8, 8, 3), np.float32), spec)
    with pytest.raises(ValueError):
        ImageSpec(resize_short=8, crop=9, resample="bilinear", **IMAGENET)
    with pytest.raises(ValueError):
        ImageSpec(resize_short=8, crop=8, resample="box", **IMAGENET)
    with pytest.raises(ValueError):
        ImageSpec(resize_short=8, crop=8, resample="bilinear", layout="CHW", **IMAGENET)


def _every_mode() -> dict[str, bytes]:
    """One image per decode path: simplejpeg (RGB, grey, rotated), Pillow (CMYK JPEG, RGB, P,
    RGBA, L and 16-bit PNGs)."""
    arr = photo(300, 200, seed=3)
    rgb = Image.fromarray(arr)
    rgba = np.dstack([arr, np.linspace(0, 255, 300 * 200).reshape(200, 300).astype(np.uint8)])
    return {
        "jpeg": encode(arr, "JPEG", quality=90),
        "jpeg_grey": encode(rgb.convert("L"), "JPEG"),
        "jpeg_rotated": with_orientation(arr, 6),
        "jpeg_cmyk": encode(rgb.convert("CMYK"), "JPEG", quality=95),
        "png": encode(arr, "PNG"),
        "png_palette": encode(rgb.convert("P"), "PNG"),
        "png_rgba": encode(rgba, "PNG"),
        "png_grey": encode(rgb.convert("L"), "PNG"),
        "png_16bit": encode(Image.fromarray(arr[..., 0].astype(np.uint16) * 257), "PNG"),
    }


@pytest.mark.parametrize("kind", list(_every_mode()))
def test_preprocess_equals_decode_then_resize_crop(kind):
    """However preprocess reaches the resize (simplejpeg's array, or Pillow's image directly),
    the crop is the one of the decoded RGB array: outputs do not depend on the memory path."""
    data = _every_mode()[kind]
    spec = ImageSpec(resize_short=160, crop=128, resample="bicubic", **IMAGENET)
    want = np.asarray(resize_crop(Image.fromarray(decode_reference(data)), spec))
    assert np.array_equal(preprocess(data, spec), want)


PEAK_SCRIPT = """
import sys
from openhood.data.image import ImageSpec, preprocess
SPEC = ImageSpec(resize_short=256, crop=224, mean=(0.5,) * 3, std=(0.5,) * 3, resample="bilinear")
def hwm():  # this process's peak resident bytes (VmHWM; fresh at exec, unlike ru_maxrss)
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
data = open(sys.argv[1], "rb").read()
preprocess(open(sys.argv[2], "rb").read(), SPEC)  # first-call costs (codecs, resize tables)
open("/proc/self/clear_refs", "w").write("5")  # peak := now
before = hwm()
preprocess(data, SPEC)
print(hwm() - before)
"""


@pytest.mark.parametrize(
    "kind,make",
    [
        ("png", lambda: encode(np.full((3000, 4000, 3), 90, np.uint8), "PNG")),
        ("png_rgba", lambda: encode(np.full((3000, 4000, 4), 90, np.uint8), "PNG")),
        ("jpeg", lambda: jpeg(4000, 3000)),
    ],
)
def test_decode_cost_covers_the_measured_peak(tmp_path, kind, make):
    """decode_cost, read from the header, is at least what preprocess really holds at its peak
    (the growth of the peak RSS of a fresh process, with the script's SPEC), and within 2x of
    it: a budget built on it neither lets memory run over nor refuses images for nothing."""
    import subprocess
    import sys

    data = make()
    (tmp_path / "img").write_bytes(data)
    mode, fmt = ("RGB", "JPEG") if kind == "jpeg" else ("RGBA" if kind == "png_rgba" else "RGB", "PNG")
    (tmp_path / "small").write_bytes(encode(Image.fromarray(photo(64, 48)).convert(mode), fmt))
    out = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(tmp_path / "img"), str(tmp_path / "small")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    peak = int(out.stdout)
    cost = decode_cost(
        data, ImageSpec(resize_short=256, crop=224, resample="bilinear", mean=(0.5,) * 3, std=(0.5,) * 3)
    )
    print(f"{kind}: decode_cost {cost / 2**20:.1f} MiB, measured peak {peak / 2**20:.1f} MiB")
    assert peak <= cost <= 2 * peak + 8 * 2**20


def test_decode_cost_reads_the_header_only():
    """Costing an image decodes none of it: a PNG whose pixel data is cut off after the header
    is costed (its decode fails later, in a worker)."""
    spec = ImageSpec(resize_short=256, crop=224, resample="bilinear", **IMAGENET)
    png = encode(photo(300, 200), "PNG")
    cut = png[: png.index(b"IDAT") + 40]
    assert decode_cost(cut, spec) == decode_cost(png, spec) == 300 * 200 * 4 + 8 * (256 * 300 + 384 * 256)
    with pytest.raises(CorruptImage):
        preprocess(cut, spec)


def test_a_thin_image_whose_resize_would_be_huge_is_refused_from_its_header():
    # Hostile pass: a 6 KB 8x100000 PNG resized to 256x3,200,000 took a decode worker to 3.4 GB.
    import io

    from PIL import Image

    from openhood.data.image import ImageSpec, ImageTooLarge, decode_cost, preprocess

    spec = ImageSpec(256, 224, (0.5,) * 3, (0.5,) * 3, "bilinear")
    buf = io.BytesIO()
    Image.new("RGB", (8, 100_000), (10, 20, 30)).save(buf, format="PNG")
    data = buf.getvalue()
    assert len(data) < 100_000
    for fn in (decode_cost, preprocess):
        with pytest.raises(ImageTooLarge, match="aspect ratio"):
            fn(data, spec)
    buf = io.BytesIO()
    Image.new("RGB", (64, 4000), (10, 20, 30)).save(buf, format="PNG")  # thin but fine: 256x16000
    assert preprocess(buf.getvalue(), spec).shape == (224, 224, 3)
