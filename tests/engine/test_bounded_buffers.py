"""The NumPy engine's reused buffers stay bounded however many shapes it sees (issue 18)."""

import numpy as np

from openhood.engine.kernels import ops, parallel
from openhood.engine.kernels.parallel import RowSplitter


def kept_elements(splitter: RowSplitter) -> int:
    return sum(buf.size for buf in splitter._scratch.__dict__.values())


def test_scratch_is_reused_and_grows_only_to_the_largest_shape():
    splitter = RowSplitter(1)
    big = splitter.scratch("scores", (4, 100, 100))
    for t in range(1, 100):  # every smaller shape reuses the same memory
        small = splitter.scratch("scores", (4, t, t))
        assert small.shape == (4, t, t) and np.shares_memory(small, big)
    assert kept_elements(splitter) == 4 * 100 * 100


def test_scratch_above_the_cap_is_not_kept(monkeypatch):
    monkeypatch.setattr(parallel, "MAX_KEPT_SCRATCH_ELEMENTS", 50_000)
    splitter = RowSplitter(1)
    kept = splitter.scratch("scores", (200, 200))  # 40,000 elements: kept
    for n in (300, 400, 500):  # past the cap: a one-off array each time
        one_off = splitter.scratch("scores", (n, n))
        assert one_off.shape == (n, n) and not np.shares_memory(one_off, kept)
        assert not np.shares_memory(one_off, splitter.scratch("scores", (n, n)))
    assert kept_elements(splitter) == 40_000
    assert np.shares_memory(splitter.scratch("scores", (100, 100)), kept)


def test_zero_bias_rows_are_one_shared_row_not_one_per_width(monkeypatch):
    monkeypatch.setattr(ops, "_ZEROS", np.zeros(0, dtype=np.float32))
    rows = [ops._bias_or_zeros(None, width) for width in range(1, 513)]  # every sequence length
    assert ops._ZEROS.size == 512
    for width, row in enumerate(rows, start=1):
        assert row.shape == (width,) and not row.any() and not row.flags.writeable
    assert np.shares_memory(ops._bias_or_zeros(None, 7), ops._ZEROS)
    bias = np.ones(3, dtype=np.float32)
    assert ops._bias_or_zeros(bias, 3) is bias
