"""Calibration observers: ranges they propose on known distributions."""

import numpy as np
import pytest

from openhood.engine.quant.observers import MinMaxObserver, MSEObserver, PercentileObserver, make_observer


def heavy_tailed(rng, n=50_000):
    x = rng.standard_normal(n).astype(np.float32)
    x[:5] = [40.0, -35.0, 60.0, 38.0, -50.0]  # a few BERT-like outliers
    return x


def test_minmax_tracks_extremes_over_batches():
    obs = MinMaxObserver()
    obs.update(np.array([1.0, 2.0]))
    obs.update(np.array([-3.0, 0.5]))
    assert obs.range() == (-3.0, 2.0)


def test_empty_observer_refuses():
    with pytest.raises(ValueError, match="no data"):
        MinMaxObserver().range()


def test_histogram_keeps_every_count_when_range_grows():
    rng = np.random.default_rng(0)
    obs = PercentileObserver()
    for scale in (1.0, 10.0, 0.1, 100.0):  # later batches force re-binning
        obs.update(rng.standard_normal(1000) * scale)
    assert obs.counts.sum() == 4000
    assert obs.edges[0] <= obs.lo and obs.edges[-1] >= obs.hi


def test_percentile_clips_outliers_but_keeps_the_bulk():
    rng = np.random.default_rng(1)
    x = heavy_tailed(rng)
    obs = PercentileObserver(99.99)
    for chunk in np.array_split(x, 7):
        obs.update(chunk)
    lo, hi = obs.range()
    assert -10 < lo < -3 and 3 < hi < 10  # outliers at ±35..60 cut off
    inside = np.mean((x >= lo) & (x <= hi))
    assert inside >= 0.9997


def test_mse_beats_minmax_on_its_own_objective():
    # Laplace: the 8-bit MSE-optimal clip is near 10 scale units, inside the sample extremes.
    rng = np.random.default_rng(2)
    x = rng.laplace(size=400_000).astype(np.float32)
    mse, mm = MSEObserver(), MinMaxObserver()
    mse.update(x)
    mm.update(x)
    a, b = mse.range()
    assert mm.lo <= a and b <= mm.hi
    assert (b - a) < 0.95 * (mm.hi - mm.lo)  # it clips the tails
    assert mse.expected_error(a, b) < mse.expected_error(*mm.range())

    # Check the expected-error model against the real quantize→dequantize error.
    from openhood.engine.quant.ops import activation_qparams, fake_quantize_activation

    s, z = activation_qparams(a, b)
    real = float(np.mean((fake_quantize_activation(x, s, z) - x) ** 2))
    assert real == pytest.approx(mse.expected_error(a, b), rel=0.3)


def test_mse_keeps_a_huge_outlier_that_percentile_drops():
    # Squared error punishes clipping a value at 60 more than coarser steps everywhere else.
    x = heavy_tailed(np.random.default_rng(3))
    mse, pct = MSEObserver(), PercentileObserver(99.99)
    mse.update(x)
    pct.update(x)
    assert mse.range()[1] > 50 and pct.range()[1] < 10


def test_make_observer_names():
    assert isinstance(make_observer("mse"), MSEObserver)
    with pytest.raises(ValueError, match="minmax, percentile, mse"):
        make_observer("entropy")
