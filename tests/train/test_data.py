"""Data sources and checks: the digits split, upsampling, CSV/NPZ files, every kind of bad input."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.train.data import (
    DIGITS_TEST,
    DataError,
    bilinear_matrix,
    check_arrays,
    load_dataset,
    upsample,
    upsample_naive,
)


def test_digits_split_is_the_tail():
    from sklearn.datasets import load_digits

    d = load_digits()
    ds = load_dataset("digits", None)
    assert ds.x_train.shape == (1797 - DIGITS_TEST, 64) and ds.x_test.shape == (DIGITS_TEST, 64)
    np.testing.assert_array_equal(ds.x_test, d.data[-DIGITS_TEST:])
    np.testing.assert_array_equal(ds.y_test, d.target[-DIGITS_TEST:])
    assert ds.image_shape == (8, 8) and ds.n_classes == 10


def test_upsampling_matches_naive_and_keeps_range():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 17, (3, 8, 8)).astype(float)
    up = upsample(imgs, 28)
    assert up.shape == (3, 28, 28)
    np.testing.assert_allclose(up[1], upsample_naive(imgs[1], 28), atol=1e-12)
    assert up.min() >= 0 and up.max() <= 16
    np.testing.assert_allclose(up[:, [0, -1]][:, :, [0, -1]], imgs[:, [0, -1]][:, :, [0, -1]])  # corners kept
    np.testing.assert_allclose(bilinear_matrix(8, 28).sum(axis=1), 1.0)
    ds = load_dataset("digits28", None)
    assert ds.n_features == 784 and ds.image_shape == (28, 28)


@pytest.mark.parametrize(
    "x, y, kw, message",
    [
        (np.zeros((0, 4)), np.zeros(0, int), {}, "non-empty"),
        (np.ones((3, 4)), np.array([0, 1, 2]), {"n_features": 5}, "4 features per row, the model takes 5"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), np.array([0, 1]), {}, "NaN/inf"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), np.array([0, 1]), {}, "NaN/inf"),
        (np.ones((2, 2)), np.array([0, 10]), {"n_classes": 10}, "labels out of range"),
        (np.ones((2, 2)), np.array([0, -1]), {}, "labels out of range"),
        (np.ones((2, 2)), np.array([0.5, 1.0]), {}, "integers"),
        (np.ones((2, 2)), np.array([0, 1, 1]), {}, "labels of shape"),
    ],
)
def test_bad_arrays_are_refused(x, y, kw, message):
    with pytest.raises(DataError, match=message):
        check_arrays(x, y, **kw)


def test_csv_and_npz(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((20, 3)), rng.integers(0, 3, 20)
    y[:3] = [0, 1, 2]
    csv = tmp_path / "d.csv"
    csv.write_text(
        "a,b,c,label\n" + "\n".join(",".join(map(str, [*r, lab])) for r, lab in zip(x, y, strict=True)) + "\n"
    )
    ds = load_dataset(None, str(csv), test_fraction=0.25)
    assert ds.x_train.shape == (15, 3) and ds.x_test.shape == (5, 3) and ds.n_classes == 3
    np.testing.assert_allclose(ds.x_test, x[15:])
    npz = tmp_path / "d.npz"
    np.savez(npz, x=x[:15], y=y[:15], x_test=x[15:], y_test=y[15:])
    ds2 = load_dataset(None, str(npz))
    np.testing.assert_array_equal(ds2.y_test, y[15:])
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,0\n3,oops,1\n")
    with pytest.raises(DataError, match="line 2"):
        load_dataset(None, str(bad))
    with pytest.raises(DataError, match="no data rows"):
        (tmp_path / "empty.csv").write_text("")
        load_dataset(None, str(tmp_path / "empty.csv"))
    np.savez(tmp_path / "wrong.npz", features=x)
    with pytest.raises(DataError, match="'x'"):
        load_dataset(None, str(tmp_path / "wrong.npz"))
    np.savez(tmp_path / "wide.npz", x=x, y=y, x_test=np.ones((2, 4)), y_test=np.array([0, 1]))
    with pytest.raises(DataError, match="the model takes 3"):
        load_dataset(None, str(tmp_path / "wide.npz"))
