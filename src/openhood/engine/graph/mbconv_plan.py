"""Small inverted-residual blocks (batch 1) from prepared native call lists, one call per thread.

``conv.mbconv`` runs a tile as three kernel calls (expand 1×1 into a zero-padded band →
depthwise → project 1×1) with Python between them: argument conversion, ~264 ``.ctypes.data``
reads per pass, scratch lookups, and with two threads a GIL retake after every call. For a
block of at most ``PLAN_MAX_TILES`` tiles (Lite0 at batch 1) this module prepares the same
calls once per input shape and buffer addresses as ``engine.kernels.call_list`` records and runs each
thread's share as one native call:

- a *part* is one thread's share: with two threads, one tile each when there are two tiles,
  else half the hidden channels of the one tile (the depthwise is per channel, so the parts
  meet only in the project's sum); without a split, one part holding every tile;
- per tile: the expand (``pointwise_simd``) writes into the tile's own zero-padded band (no
  expand: an ``ADD`` record copies the input rows there), then ``depthwise_simd``'s interior
  kernel (no border pixels), then the project; a project width that is not a multiple of 16
  (Lite0's 24 and 40) goes through zero-padded panels into a scratch, and an ``ADD`` record
  adds the residual while copying the real columns out; channel parts write partial sums that
  one ``ADD`` record (on the calling thread, after the join) adds with the residual.

``mbconv`` is the block as the executor runs it: from a plan when it has at most
``PLAN_MAX_TILES`` tiles and the plan supports it, else ``conv.mbconv`` (call by call).

The trade-off: each tile owns its zero-padded band (pads zeroed once, at preparation: nothing
else writes there) instead of sharing the per-thread scratch, i.e. ~7 MB kept per executor
thread at batch 1 for Lite0; and a prepared list holds raw addresses, so it is keyed by the
addresses of its input, output and residual and rebuilt when one moves (the executor's buffer
pool hands out the same buffers every call, so after the first call it is found).
Unsupported shapes (hidden width not a multiple of 16 per part, no SIMD kernels) return
False and ``mbconv`` takes ``conv.mbconv``'s call-by-call path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from openhood.engine.graph import conv
from openhood.engine.kernels import call_list, depthwise_simd, pointwise_simd
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter

# A block of at most this many tiles (batch 1: 1 or 2) runs from a plan: its kernel calls
# prepared once per shape and buffer, each thread's share one native call (``engine.kernels.call_list``)
# instead of three ctypes calls per tile with Python between them. False: always call by call.
PLANNED_MBCONV = True
PLAN_MAX_TILES = 2
# Prepared lists kept per block (input/output/residual address triples): the buffer pool can
# alternate between a few equal-sized buffers.
MAX_LISTS_PER_BLOCK = 4
_STATE_KEY, _ARENA_KEY = "mbconv_plan", "mbconv_plan.arena"
# Smallest arena buffer, floats: one fused tile's budget, so most blocks share the first one.
MIN_ARENA_FLOATS = conv.MBCONV_TILE_BYTES // 4
_NR = 16  # output columns per packed panel and channels per depthwise block (both kernels')


@dataclass
class _Buffers:
    """A block's prepared lists for one input shape and split, by (input, output, residual) address."""

    project: Linear
    lists: dict[tuple[int, int, int], _Prepared] = field(default_factory=dict)


class _Arena:
    """Scratch shared by every block's lists on one calling thread, one buffer per (role, part):
    blocks run one after another and a part's tiles one after another, so the same memory
    (warm in L2 from the previous block) serves them all. A request larger than the buffer
    replaces it; lists prepared earlier keep (and go on using) the old one."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, int], np.ndarray] = {}

    def take(self, role: str, part: int, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        buf = self._buffers.get((role, part))
        if buf is None or buf.size < size:
            buf = self._buffers[(role, part)] = np.empty(max(size, MIN_ARENA_FLOATS), np.float32)
        return buf[:size].reshape(shape)


@dataclass
class _Prepared:
    parts: list[tuple[int, int]]  # per part: (records address, count)
    combine: tuple[int, int] | None  # run on the calling thread after the parts
    keep: list[object]  # every array the records point into


@dataclass(slots=True)
class Block:
    """An inverted-residual block's layers: ``conv.mbconv``'s arguments of these names."""

    expand: Linear | None
    dw: np.ndarray
    dw_bias: np.ndarray
    stride: int
    project: Linear


def mbconv(
    x: np.ndarray,
    block: Block,
    splitter: RowSplitter,
    residual: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``conv.mbconv`` of x through ``block`` (the same result), from a prepared plan when the
    block has at most ``PLAN_MAX_TILES`` tiles and ``run`` supports it."""
    k, hidden, cout = block.dw.shape[0], block.dw.shape[2], block.project.out_features
    if PLANNED_MBCONV:
        per_tile, _, bands = conv.mbconv_tiling(x.shape, k, block.stride, hidden)
        if -(-x.shape[0] // per_tile) * bands <= PLAN_MAX_TILES:
            out = conv.output(x, block.stride, cout, out)
            macs = conv.mbconv_macs(x.shape, k, block.stride, hidden, cout, block.expand is not None)
            if run(x, block, splitter, residual, out, splitter.threads > 1 and macs >= conv.MIN_PARALLEL_CONV):
                return out
    return conv.mbconv(x, block.expand, block.dw, block.dw_bias, block.stride, block.project, splitter, residual, out)


def run(
    x: np.ndarray,
    block: Block,
    splitter: RowSplitter,
    residual: np.ndarray | None,
    out: np.ndarray,
    split: bool,
) -> bool:
    """``conv.mbconv`` of x through ``block`` into ``out`` from a prepared plan; False (nothing
    done) when this block cannot run that way."""
    run_list = call_list.runner()
    if run_list is None:
        return False
    state = splitter.thread_state()
    plans: dict[tuple[object, ...], _Buffers] = state.setdefault(_STATE_KEY, {})
    arena: _Arena = state.setdefault(_ARENA_KEY, _Arena())
    project = block.project
    key = (id(project), x.shape, split, splitter.threads)
    bufs = plans.get(key)
    if bufs is None or bufs.project is not project:
        bufs = plans[key] = _Buffers(project)
    addresses = (x.ctypes.data, out.ctypes.data, 0 if residual is None else residual.ctypes.data)
    prepared = bufs.lists.get(addresses)
    if prepared is None:
        prepared = _prepare(x, block, splitter.threads, residual, out, split, arena)
        if prepared is None:
            return False
        if len(bufs.lists) >= MAX_LISTS_PER_BLOCK:
            bufs.lists.pop(next(iter(bufs.lists)))
        bufs.lists[addresses] = prepared
    parts = prepared.parts
    if len(parts) == 1:
        run_list(*parts[0])
    else:
        splitter.run_chunks(lambda s, e: _run_parts(run_list, parts, s, e), len(parts), 1, 1, 0)
    if prepared.combine is not None:
        run_list(*prepared.combine)
    return True


def _run_parts(run_list: Callable[[int, int], None], parts: list[tuple[int, int]], s: int, e: int) -> None:
    for i in range(s, e):
        run_list(*parts[i])


def _prepare(
    x: np.ndarray,
    block: Block,
    threads: int,
    residual: np.ndarray | None,
    out: np.ndarray,
    split: bool,
    arena: _Arena,
) -> _Prepared | None:
    """The records of every part (see the module docstring), or None if unsupported."""
    expand, dw, dw_bias, stride, project = block.expand, block.dw, block.dw_bias, block.stride, block.project
    n, h, w, cin = x.shape
    k, hidden, cout = dw.shape[0], dw.shape[2], project.out_features
    pw_fn, dw_fn = pointwise_simd.kernel(), depthwise_simd.kernel(k)
    if pw_fn is None or dw_fn is None or not conv.SIMD_DEPTHWISE or not conv.SIMD_POINTWISE:
        return None
    if expand is not None and not pointwise_simd.suits(expand):
        return None
    if project.weight.dtype != np.float32 or (expand is None and cin != hidden):
        return None
    pt, pl, oh, ow = conv.same_geometry(x.shape, k, stride)
    per_tile, rows, bands = conv.mbconv_tiling(x.shape, k, stride, hidden)
    tiles = -(-n // per_tile) * bands
    # parts: (tiles, hidden channel range) each
    if split and tiles > 1:
        parts = [([t], (0, hidden)) for t in range(tiles)]
    elif split and expand is not None and threads > 1:
        step = -(-hidden // (threads * _NR)) * _NR
        parts = [([0], (c0, min(c0 + step, hidden))) for c0 in range(0, hidden, step)]
    else:
        parts = [(list(range(tiles)), (0, hidden))]
    if any((c1 - c0) % _NR for _, (c0, c1) in parts):
        return None
    lo, hi = np.float32(0.0), np.float32(6.0)  # ReLU6 after the expand and the depthwise
    inf = np.float32(np.inf)
    cout16 = -(-cout // _NR) * _NR
    packed_p = pointwise_simd.panels(project)  # (cout16/16, hidden, 16), columns past cout zero
    p_bias = np.zeros(cout16, np.float32)
    if project.bias is not None:
        p_bias[:cout] = project.bias
    zero_bias = np.zeros(max(cout16, hidden), np.float32)
    e_bias = zero_bias
    packed_e = None
    if expand is not None:
        packed_e = pointwise_simd.panels(expand)
        e_bias = expand.bias if expand.bias is not None else zero_bias
    y = out.reshape(-1, cout)  # (N*OH*OW, Cout)
    res = None if residual is None else residual.reshape(-1, cout)
    channel_parts = len(parts) > 1 and parts[0][0] == parts[1][0]
    keep: list[object] = [packed_p, p_bias, zero_bias, e_bias, dw, dw_bias]
    lists: list[tuple[int, int]] = []
    partials: list[np.ndarray] = []
    for part, (part_tiles, (c0, c1)) in enumerate(parts):
        c = c1 - c0
        calls = call_list.CallList()
        geometry = [conv.tile_rows(t, n, h, k, stride, pt, oh, per_tile, rows, bands) for t in part_tiles]
        most = max((n1 - n0) * (i1 - i0) * ow for n0, n1, i0, i1, _, _ in geometry)  # output pixels
        d = arena.take("depthwise", part, (most * c,))  # depthwise output of a tile, (pixels, c)
        scratch = arena.take("project", part, (most, cout16)) if channel_parts or cout % _NR else None
        keep += [d, scratch]
        for n0, n1, i0, i1, a0, a1 in geometry:
            top = i0 * stride - pt  # the image row of the padded band's row 0
            ph, pw = (i1 - i0 - 1) * stride + k, (ow - 1) * stride + k
            ra, rb = a0 - top, a1 - top  # band rows inside the image
            hp = arena.take("band", part, (n1 - n0, ph, pw, c))
            keep.append(hp)
            for m in range(n1 - n0):  # zero what the expand (or copy) leaves: pad rows, pad columns
                row = pw * c
                if ra > 0:
                    calls.add_rows(ra, row, (hp[m, 0].ctypes.data, row), None)
                if rb < ph:
                    calls.add_rows(ph - rb, row, (hp[m, rb].ctypes.data, row), None)
                if pl > 0:
                    calls.add_rows(rb - ra, pl * c, (hp[m, ra, 0].ctypes.data, row), None)
                if pl + w < pw:
                    calls.add_rows(rb - ra, (pw - pl - w) * c, (hp[m, ra, pl + w].ctypes.data, row), None)
            if not x[n0:n1, a0:a1].flags.c_contiguous:  # pragma: no cover - tiles are whole images or one image's band
                return None
            if expand is not None:
                assert packed_e is not None
                xrows = x[n0:n1, a0:a1].reshape(-1, cin)  # a view (contiguous rows)
                at = conv._padded_rows(n1 - n0, a1 - a0, w, ph, pw, ra, pl, c)
                keep.append(at)
                calls.add(
                    call_list.PW,
                    pw_fn,
                    pointwise_simd.pointwise_args(xrows, packed_e, e_bias, hp[0, 0], lo, hi, None, c0, at),
                )
            else:
                for m in range(n1 - n0):  # the input rows into the band's interior, row by row
                    into = (hp[m, ra, pl].ctypes.data, pw * c)
                    calls.add_rows(a1 - a0, w * c, into, (x[n0 + m, a0].ctypes.data, w * cin))
            pixels = (n1 - n0) * (i1 - i0) * ow
            dv = d[: pixels * c].reshape(n1 - n0, i1 - i0, ow, c)
            band = (0, n1 - n0), (0, i1 - i0), (0, ow)
            calls.add(
                call_list.DW,
                dw_fn,
                depthwise_simd.interior_args(hp, dw, dw_bias, dv, stride, lo, hi, c0, *band),
            )
            src = d[: pixels * c].reshape(pixels, c)
            p0 = (n0 * oh + i0) * ow  # first output pixel of the tile (bands: one image)
            if channel_parts:  # a partial sum over channels [c0, c1); part 0 adds the bias
                assert scratch is not None
                bias = p_bias if part == 0 else zero_bias
                args = pointwise_simd.pointwise_args(
                    src, packed_p, bias, scratch[:pixels], -inf, inf, None, 0, None, c0
                )
                calls.add(call_list.PW, pw_fn, args)
                partials.append(scratch[:pixels])
            elif scratch is None:  # straight into the output rows, bias and residual in the store
                r = None if res is None else res[p0 : p0 + pixels]
                args = pointwise_simd.pointwise_args(src, packed_p, p_bias, y[p0 : p0 + pixels], -inf, inf, r)
                calls.add(call_list.PW, pw_fn, args)
            else:  # a width of zero-padded panels, then its real columns (+ residual) out
                args = pointwise_simd.pointwise_args(src, packed_p, p_bias, scratch[:pixels], -inf, inf)
                calls.add(call_list.PW, pw_fn, args)
                r = None if res is None else res[p0 : p0 + pixels]
                calls.add_rows(pixels, cout, y[p0 : p0 + pixels], scratch[:pixels], r)
        lists.append(calls.freeze())
        keep += [calls.records, calls.keep]
    combine = None
    if channel_parts:  # y = Σ partials (+ residual), two operands per record
        calls = call_list.CallList()
        pixels = y.shape[0]
        calls.add_rows(pixels, cout, y, partials[0], partials[1], res)
        for i in range(2, len(partials), 2):
            calls.add_rows(pixels, cout, y, y, partials[i], partials[i + 1] if i + 1 < len(partials) else None)
        combine = calls.freeze()
        keep += [calls.records, calls.keep]
    return _Prepared(lists, combine, keep)
