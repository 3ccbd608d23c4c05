"""LengthBuckets: derivation from a length distribution (MISSION R2) and lookups."""

import numpy as np
import pytest

from openhood.scheduler import LENGTH_LABELS, LengthBuckets, length_label


@pytest.mark.parametrize("seed,scale", [(0, 20.0), (1, 45.0), (2, 90.0)])
def test_from_lengths_puts_about_80_percent_in_first_two_buckets(seed, scale):
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(scale), 0.6, 5000).astype(int) + 2, 3, 1000)
    b = LengthBuckets.from_lengths(lengths, 256)
    assert b.bounds[-1] == 256
    assert all(x % 16 == 0 for x in b.bounds[:-1])
    assert all(nxt >= 1.5 * cur for cur, nxt in zip(b.bounds[:-2], b.bounds[1:-1], strict=True))  # not too dense
    shares = b.share_per_bucket(lengths)
    assert abs(sum(shares) - 1) < 1e-9
    if len(b) > 2:
        assert 0.75 <= sum(shares[:2]) <= 0.95


def test_from_lengths_all_long_collapses_to_max():
    assert LengthBuckets.from_lengths([500] * 10, 256).bounds == (256,)


def test_for_model_clips_and_appends_max():
    assert LengthBuckets.for_model((32, 64, 128, 256, 512), 128).bounds == (32, 64, 128)
    assert LengthBuckets.for_model((48, 80), 256).bounds == (48, 80, 256)
    with pytest.raises(ValueError, match="positive"):
        LengthBuckets((0, 8))


def test_index_is_smallest_bucket_that_fits():
    b = LengthBuckets((48, 80, 160, 256))
    assert [b.index(n) for n in (1, 48, 49, 80, 81, 256)] == [0, 0, 1, 1, 2, 3]
    with pytest.raises(ValueError, match="exceeds"):
        b.index(257)


def test_length_labels_are_bounded_and_inclusive():
    assert LENGTH_LABELS == ("0-32", "33-64", "65-128", "129-256", "257+")
    assert [length_label(n) for n in (0, 32, 33, 64, 65, 128, 129, 256, 257, 10**6)] == [
        "0-32",
        "0-32",
        "33-64",
        "33-64",
        "65-128",
        "65-128",
        "129-256",
        "129-256",
        "257+",
        "257+",
    ]
