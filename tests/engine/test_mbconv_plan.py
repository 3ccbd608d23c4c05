"""Prepared native call lists (engine.kernels.call_list) and the planned MBConv block (engine.graph.mbconv_plan):
against the naive three convs and against mbconv's call-by-call path."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.graph import conv, mbconv_plan
from openhood.engine.kernels import call_list, depthwise_simd
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter

pytestmark = pytest.mark.skipif(
    call_list.runner() is None or depthwise_simd.kernel(3) is None, reason="no AVX2/FMA: no native call lists"
)


def rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def test_add_rows_record_adds_strided_rows_in_place():
    rng = np.random.default_rng(0)
    src, r1 = rand(rng, 5, 12), rand(rng, 5, 9)
    dst = np.zeros((5, 7), np.float32)
    calls = call_list.CallList()
    calls.add_rows(5, 7, dst, src, r1)  # two operands, strides 12 / 9 / 7
    calls.add_rows(5, 7, dst, dst, None, r1[:, 2:])  # in place, one operand absent
    calls.add_rows(2, 7, (dst[3].ctypes.data, 7), None)  # zero rows 3-4 through an (address, stride) pair
    call_list.runner()(*calls.freeze())
    want = src[:, :7] + r1[:, :7] + r1[:, 2:9]
    want[3:] = 0
    np.testing.assert_allclose(dst, want, rtol=1e-6)


def test_records_check_their_arity():
    with pytest.raises(ValueError, match="takes 10 arguments"):
        call_list.CallList().add(call_list.ADD, None, (1, 2))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(
    "n,h,cin,hidden,cout,k,s,expand,residual",
    [
        (1, 14, 40, 96, 40, 5, 1, True, True),  # project width 40: padded panels + ADD with the skip
        (1, 13, 24, 144, 24, 3, 2, True, False),  # odd size, stride 2, width 24
        (1, 9, 16, 96, 32, 3, 1, True, False),  # project straight into the output
        (2, 7, 32, 64, 32, 5, 1, True, True),  # two images in one tile
        (1, 12, 32, 32, 16, 3, 1, False, False),  # no expansion: the input copied into the band
    ],
)
@pytest.mark.parametrize("tiles", [1, 2])  # one tile (channels split over threads), two (a tile per thread)
def test_planned_mbconv_matches_naive_and_call_by_call(
    monkeypatch, threads, n, h, cin, hidden, cout, k, s, expand, residual, tiles
):
    oh = -(-h // s)
    image_bytes = 4 * hidden * (h * h + oh * oh)
    for budget in [1 << 30] if tiles == 1 else [image_bytes * f // 20 for f in range(39, 4, -1)]:
        monkeypatch.setattr(conv, "MBCONV_TILE_BYTES", budget)
        per_tile, _, bands = conv.mbconv_tiling((n, h, h, cin), k, s, hidden)
        if -(-n // per_tile) * bands == tiles:
            break
    else:
        pytest.skip(f"no tile budget gives {tiles} tiles")
    monkeypatch.setattr(conv, "MIN_PARALLEL_CONV", 0)  # split over the threads wherever it can
    rng = np.random.default_rng(h + k + cout)
    x = np.abs(rand(rng, n, h, h, cin))
    we, be = (rand(rng, cin, hidden) * 0.3, rand(rng, hidden)) if expand else (None, None)
    dw, bd, wp, bp = rand(rng, k, k, hidden) * 0.3, rand(rng, hidden), rand(rng, hidden, cout) * 0.2, rand(rng, cout)
    res = rand(rng, n, oh, oh, cout) if residual else None
    ref = conv.mbconv_naive(x, we, be, dw, bd, s, wp, bp, res)
    e, p = (Linear(we, be) if expand else None), Linear(wp, bp)
    sp = RowSplitter(threads)
    try:
        out = np.full((n, oh, oh, cout), np.nan, np.float32)
        block = mbconv_plan.Block(e, dw, bd, s, p)
        planned = [mbconv_plan.mbconv(x, block, sp, res, out).copy() for _ in range(2)]  # prepare, then reuse
        assert sp.thread_state()[mbconv_plan._STATE_KEY], "the planned path did not run"
        moved = mbconv_plan.mbconv(x.copy(), block, sp, None if res is None else res.copy())  # new addresses
        monkeypatch.setattr(mbconv_plan, "PLANNED_MBCONV", False)
        unplanned = mbconv_plan.mbconv(x, block, sp, res)
        old = conv.mbconv(x, e, dw, bd, s, p, sp, res)  # the call-by-call path itself
    finally:
        sp.close()
    np.testing.assert_array_equal(unplanned, old)  # PLANNED_MBCONV off: exactly conv.mbconv
    for got in (*planned, moved):
        assert np.max(np.abs(got - ref)) < 1e-4
        assert np.max(np.abs(got - old)) < 1e-5


def test_unsupported_block_takes_the_call_by_call_path(monkeypatch):
    """A hidden width that is not a multiple of 16 has no SIMD depthwise: mbconv_plan declines."""
    rng = np.random.default_rng(3)
    x = np.abs(rand(rng, 1, 8, 8, 8))
    we, dw, wp = rand(rng, 8, 24), rand(rng, 3, 3, 24), rand(rng, 24, 16)
    sp = RowSplitter(1)
    try:
        block = mbconv_plan.Block(Linear(we), dw, np.zeros(24, np.float32), 1, Linear(wp))
        assert not mbconv_plan.run(x, block, sp, None, np.empty((1, 8, 8, 16), np.float32), False)
        got = mbconv_plan.mbconv(x, block, sp)
    finally:
        sp.close()
    assert np.max(np.abs(got - conv.mbconv_naive(x, we, None, dw, np.zeros(24), 1, wp, None, None))) < 1e-4
