"""Training data: the bundled UCI digits (8×8 or upsampled to 28×28), CSV/NPZ files, and checks.

- ``--dataset digits``: scikit-learn's ``load_digits()`` (1797 images, 64 pixels valued 0–16,
  read offline from the package), split by position: the LAST ``DIGITS_TEST`` samples in the
  file's own order are the test set, never trained on nor used for early stopping.
- ``--dataset digits28``: the same images upsampled bilinearly to 28×28 = 784 features, so the
  article's 784→256→10 network is trained on real pixels (same split, same 0–16 range).
- ``--data FILE``: ``.npz`` with ``x`` (N, F) and ``y`` (N,) (optionally ``x_test``/``y_test``),
  or ``.csv`` (numbers only, optional header, label in the last column); without an explicit test
  set the last ``test_fraction`` of the rows is held out, the same tail convention as digits.

Every source goes through ``check_arrays``: empty data, NaN/inf features, non-integer or out of
range labels and a wrong feature count are ``DataError`` with a message that names the problem.
The trade-off: files are read whole into memory, which suits the tabular sizes an MLP trains on.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DIGITS_TEST = 360  # the held-out tail of load_digits()
DIGITS_SIDE = 8
UPSAMPLED_SIDE = 28


class DataError(ValueError):
    """Input data that cannot be trained or scored on; the message says why."""


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray  # (N, F) float64, raw values
    y_train: np.ndarray  # (N,) int64
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    image_shape: tuple[int, int] | None = None  # (H, W) when features are a row-major grey image

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]


def check_arrays(
    x, y, *, n_features: int | None = None, n_classes: int | None = None, what: str = "data"
) -> tuple[np.ndarray, np.ndarray]:
    """Validated (x (N, F) float64, y (N,) int64), or ``DataError``."""
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what}: features are not numeric ({exc})") from None
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"{what}: expected a non-empty (rows, features) table, got shape {x.shape}")
    if n_features is not None and x.shape[1] != n_features:
        raise DataError(f"{what}: {x.shape[1]} features per row, the model takes {n_features}")
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{what}: {int(bad.sum())} NaN/inf feature values (first at row {row}, column {col})")
    y = np.asarray(y)
    if y.shape != (x.shape[0],):
        raise DataError(f"{what}: {x.shape[0]} feature rows but labels of shape {y.shape}")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DataError(f"{what}: labels must be integers 0..K-1")
    elif y.dtype.kind not in "iu":
        raise DataError(f"{what}: labels must be integers 0..K-1, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.min() < 0 or (n_classes is not None and y.max() >= n_classes):
        hi = "K-1" if n_classes is None else str(n_classes - 1)
        raise DataError(f"{what}: labels out of range: min {y.min()}, max {y.max()}, allowed 0..{hi}")
    return x, y


def bilinear_matrix(src: int, dst: int) -> np.ndarray:
    """(dst, src) interpolation weights, corners aligned: out = M @ img @ M.T resizes a square image.

    >>> bilinear_matrix(2, 3).tolist()
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    """
    pos = np.linspace(0.0, src - 1.0, dst)  # where each output pixel samples the source
    lo = np.minimum(np.floor(pos).astype(int), src - 2) if src > 1 else np.zeros(dst, int)
    frac = pos - lo
    m = np.zeros((dst, src))
    m[np.arange(dst), lo] = 1.0 - frac
    if src > 1:
        m[np.arange(dst), lo + 1] += frac
    return m


def upsample(images: np.ndarray, side: int) -> np.ndarray:
    """(N, s, s) → (N, side, side) bilinear, as two small matmuls."""
    m = bilinear_matrix(images.shape[1], side)  # (side, s)
    return np.einsum("ij,njk,lk->nil", m, images, m)


def upsample_naive(image: np.ndarray, side: int) -> np.ndarray:
    """One (s, s) image resized pixel by pixel: the four neighbours, weighted by distance."""
    s = image.shape[0]
    out = np.zeros((side, side))
    for r in range(side):
        for c in range(side):
            fy, fx = r * (s - 1) / (side - 1), c * (s - 1) / (side - 1)
            y0, x0 = min(int(fy), s - 2), min(int(fx), s - 2)
            dy, dx = fy - y0, fx - x0
            out[r, c] = (
                image[y0, x0] * (1 - dy) * (1 - dx)
                + image[y0, x0 + 1] * (1 - dy) * dx
                + image[y0 + 1, x0] * dy * (1 - dx)
                + image[y0 + 1, x0 + 1] * dy * dx
            )
    return out


def load_digits_dataset(side: int = DIGITS_SIDE) -> Dataset:
    """The UCI digits split by position (test = last 360), at 8×8 or upsampled to ``side``."""
    try:
        from sklearn.datasets import load_digits  # type: ignore[import-untyped]
    except ImportError:
        raise DataError("--dataset digits needs scikit-learn (pip install 'openhood[train]')") from None
    digits = load_digits()
    images = digits.images.astype(np.float64)  # (1797, 8, 8), 0..16
    if side != DIGITS_SIDE:
        images = upsample(images, side)
    x = images.reshape(len(images), -1)
    y = digits.target.astype(np.int64)
    cut = len(y) - DIGITS_TEST
    name = "digits" if side == DIGITS_SIDE else f"digits{side}"
    return Dataset(name, x[:cut], y[:cut], x[cut:], y[cut:], 10, (side, side))


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rows: list[list[float]] = []
    with path.open(newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.reader(f)):
            if not row or all(not c.strip() for c in row):
                continue
            try:
                rows.append([float(c) for c in row])
            except ValueError:
                if i == 0 and not rows:
                    continue  # a header line
                raise DataError(f"{path}: line {i + 1} has a value that is not a number") from None
    if not rows:
        raise DataError(f"{path}: no data rows")
    if len({len(r) for r in rows}) != 1:
        raise DataError(f"{path}: rows have different numbers of columns")
    table = np.asarray(rows)
    if table.shape[1] < 2:
        raise DataError(f"{path}: need feature columns and a label column")
    return table[:, :-1], table[:, -1]


def load_file_dataset(path: str | Path, test_fraction: float = 0.2, n_classes: int | None = None) -> Dataset:
    """A CSV/NPZ file of features and labels (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                if "x" not in z or "y" not in z:
                    raise DataError(f"{path}: an .npz needs arrays 'x' (N, F) and 'y' (N,), found {sorted(z.files)}")
                x, y = z["x"], z["y"]
                if "x_test" in z and "y_test" in z:
                    x_test, y_test = z["x_test"], z["y_test"]
        except (OSError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path}: not a readable .npz without pickled objects ({exc})") from None
    elif path.suffix == ".csv":
        x, y = _read_csv(path)
    else:
        raise DataError(f"{path}: expected a .csv or .npz file")
    x, y = check_arrays(x, y, n_classes=n_classes, what=str(path))
    if x_test is None or y_test is None:
        if not 0.0 < test_fraction < 1.0:
            raise DataError(f"test fraction must be in (0, 1), got {test_fraction}")
        cut = len(y) - round(len(y) * test_fraction)
        if cut <= 0 or cut >= len(y):
            raise DataError(f"{path}: {len(y)} rows are too few to hold out a test split")
        x, y, x_test, y_test = x[:cut], y[:cut], x[cut:], y[cut:]
    k = n_classes if n_classes is not None else int(max(y.max(), np.max(y_test) if len(y_test) else 0)) + 1
    x_test, y_test = check_arrays(x_test, y_test, n_features=x.shape[1], n_classes=k, what=f"{path} (test split)")
    if k < 2:
        raise DataError(f"{path}: need at least 2 classes, labels are all {int(y.max())}")
    return Dataset(path.stem, x, y, x_test, y_test, k)


def load_dataset(
    name: str | None, path: str | None, *, test_fraction: float = 0.2, n_classes: int | None = None
) -> Dataset:
    if (name is None) == (path is None):
        raise DataError("give exactly one of --dataset NAME or --data FILE")
    if path is not None:
        return load_file_dataset(path, test_fraction, n_classes)
    sides = {"digits": DIGITS_SIDE, "digits28": UPSAMPLED_SIDE}
    if name not in sides:
        raise DataError(f"unknown dataset {name!r}; known: {sorted(sides)}")
    return load_digits_dataset(sides[name])
