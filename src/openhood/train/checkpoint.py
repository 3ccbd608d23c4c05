"""A trained MLP on disk: ``model.safetensors`` + ``config.json``, written atomically, checked on load.

The folder holds tensors ``layers.{i}.weight`` (in, out), ``layers.{i}.bias`` (out,) and the
input scaler ``input.mean`` / ``input.std`` (F,), all float32, beside a JSON config naming the
format, the layer sizes, the class labels and the image shape the features come from. Loading
checks that every tensor the config implies is present, no other is, shapes chain, values are
finite: a config that does not match its weights is a ``CheckpointError`` naming the tensor,
never a wrong answer later. Never pickle. ``staged_folder`` writes a whole output folder under a
temporary name beside it and renames it into place only when complete, so a failed run leaves
no half-written model. The trade-off: replacing an existing folder is rename-then-delete, not
one atomic swap (POSIX has no atomic directory exchange without renameat2).
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from openhood.formats.errors import ModelFileError
from openhood.formats.weights import load_safetensors
from openhood.train.model import MLP

FORMAT = "openhood.mlp"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


class CheckpointError(ModelFileError):
    """A model folder that cannot be loaded; the message says which file or tensor is wrong."""


def model_config(
    model: MLP, *, labels: list[str], image_shape: tuple[int, int] | None, extra: dict | None = None
) -> dict:
    if len(labels) != model.n_classes:
        raise ValueError(f"{len(labels)} labels for {model.n_classes} classes")
    cfg = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "sizes": list(model.sizes),
        "activation": "relu",
        "output": "softmax",
        "weight_layout": "(in, out)",
        "labels": list(labels),
        "image_shape": list(image_shape) if image_shape else None,
    }
    cfg.update(extra or {})
    return cfg


def save_model(model: MLP, config: dict, folder: Path) -> None:
    """Write both files into an existing ``folder`` (use ``staged_folder`` for atomicity)."""
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in model.tensors().items()}
    save_file(tensors, str(folder / MODEL_FILE), metadata={"format": FORMAT})
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def is_mlp_folder(path: str | Path) -> bool:
    cfg = Path(path) / CONFIG_FILE
    if not cfg.is_file():
        return False
    try:
        return json.loads(cfg.read_text(encoding="utf-8")).get("format") == FORMAT
    except (ValueError, AttributeError):
        return False


def _expected_shapes(sizes: list[int]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"input.mean": (sizes[0],), "input.std": (sizes[0],)}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        shapes[f"layers.{i}.weight"] = (fan_in, fan_out)
        shapes[f"layers.{i}.bias"] = (fan_out,)
    return shapes


def load_model(folder: str | Path, dtype=np.float32) -> tuple[MLP, dict]:
    """(model, config) from a folder written by ``save_model``; ``CheckpointError`` if inconsistent."""
    folder = Path(folder)
    cfg_path, weights_path = folder / CONFIG_FILE, folder / MODEL_FILE
    for p in (cfg_path, weights_path):
        if not p.is_file():
            raise CheckpointError(f"{folder}: missing {p.name}")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CheckpointError(f"{cfg_path}: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise CheckpointError(
            f"{cfg_path}: not an {FORMAT} config (format={cfg.get('format') if isinstance(cfg, dict) else None!r})"
        )
    if cfg.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{cfg_path}: format_version {cfg.get('format_version')!r}, this openhood reads {FORMAT_VERSION}"
        )
    sizes = cfg.get("sizes")
    if not (isinstance(sizes, list) and len(sizes) >= 2 and all(isinstance(s, int) and s > 0 for s in sizes)):
        raise CheckpointError(f"{cfg_path}: 'sizes' must be a list of >= 2 positive integers, got {sizes!r}")
    labels = cfg.get("labels")
    if not (isinstance(labels, list) and len(labels) == sizes[-1]):
        raise CheckpointError(f"{cfg_path}: 'labels' must list {sizes[-1]} class names, got {labels!r}")
    shape = cfg.get("image_shape")
    if shape is not None and (not isinstance(shape, list) or len(shape) != 2 or shape[0] * shape[1] != sizes[0]):
        raise CheckpointError(f"{cfg_path}: image_shape {shape!r} does not hold {sizes[0]} features")
    try:
        tensors = load_safetensors(weights_path)
    except ModelFileError as exc:
        raise CheckpointError(str(exc)) from None
    expected = _expected_shapes(sizes)
    missing = sorted(expected.keys() - tensors.keys())
    extra = sorted(tensors.keys() - expected.keys())
    if missing or extra:
        raise CheckpointError(
            f"{weights_path} does not match config sizes {sizes}: missing {missing}, unexpected {extra}"
        )
    for name, want in expected.items():
        t = tensors[name]
        if t.shape != want:
            raise CheckpointError(
                f"{weights_path}: tensor {name} has shape {t.shape}, config sizes {sizes} imply {want}"
            )
        if not np.all(np.isfinite(t)):
            raise CheckpointError(f"{weights_path}: tensor {name} has NaN/inf values")
    if np.any(tensors["input.std"] <= 0):
        raise CheckpointError(f"{weights_path}: input.std must be > 0")
    model = MLP(tuple(sizes), dtype=dtype)
    model.load_tensors(tensors)
    return model, cfg


@contextmanager
def staged_folder(out: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``out``; on success it becomes ``out``, on error it is removed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
