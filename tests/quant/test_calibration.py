"""Calibration set: length-stratified sampling and refusal of empty / too-small sets."""

import numpy as np
import pytest

from openhood.engine.quant.calibration import (
    CalibrationSetError,
    check_calibration_size,
    format_length_table,
    length_summary,
    split_calibration,
    stratified_sample,
)


def skewed_lengths(n=20_000, seed=0):
    # Mostly short texts with a long tail, like real traffic (and many ties).
    rng = np.random.default_rng(seed)
    return np.minimum(3 + rng.geometric(0.06, n), 256)


def test_sample_matches_corpus_length_quantiles():
    lengths = skewed_lengths()
    idx = stratified_sample(lengths, 800, seed=1)
    assert len(idx) == 800 and len(np.unique(idx)) == 800
    for q in (10, 25, 50, 75, 90):
        assert abs(np.percentile(lengths[idx], q) - np.percentile(lengths, q)) <= 2
    # A uniform draw from the *short* half would fail the same check: the test can fail.
    short = np.flatnonzero(lengths <= np.median(lengths))[:800]
    assert abs(np.percentile(lengths[short], 90) - np.percentile(lengths, 90)) > 2


def test_every_length_stratum_is_represented():
    lengths = skewed_lengths()
    idx = stratified_sample(lengths, 100, strata=10)
    assert lengths[idx].max() >= np.percentile(lengths, 90)
    assert lengths[idx].min() <= np.percentile(lengths, 10)


def test_split_is_disjoint_and_both_parts_length_matched():
    lengths = skewed_lengths()
    split = split_calibration(lengths, 800, holdout_fraction=0.2)
    assert len(np.intersect1d(split.calibrate, split.holdout)) == 0
    assert len(split.calibrate) + len(split.holdout) == 800
    assert len(split.holdout) == 160
    assert abs(np.median(lengths[split.holdout]) - np.median(lengths[split.calibrate])) <= 2


@pytest.mark.parametrize("n", [0])
def test_empty_set_is_refused(n):
    with pytest.raises(CalibrationSetError, match="empty"):
        check_calibration_size(n)
    with pytest.raises(CalibrationSetError, match="empty"):
        split_calibration(np.array([], dtype=np.int64), 800)


def test_too_small_set_is_refused():
    with pytest.raises(CalibrationSetError, match="fewer than the minimum"):
        split_calibration(skewed_lengths(30), 30)
    with pytest.raises(CalibrationSetError, match="fewer than the minimum"):
        split_calibration(skewed_lengths(1000), 70)  # 70 drawn pass, but only 56 would calibrate
    with pytest.raises(CalibrationSetError, match="only 100 texts"):
        stratified_sample(skewed_lengths(100), 800)
    assert issubclass(CalibrationSetError, ValueError)


def test_length_table_lists_both_sets():
    lengths = skewed_lengths()
    table = format_length_table({"corpus": length_summary(lengths), "calibration": length_summary(lengths[:800])})
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["tokens", "n", "mean"] and "p99" in lines[0]
    assert lines[1].startswith("corpus") and lines[2].startswith("calibration")
    assert lines[2].split()[1] == "800"
