"""Depthwise k×k convolution of interior pixels: explicit 8-float vectors, 4 (5×5: 6) pixels × 16 channels.

The numba kernel (``conv_kernels.depthwise``) measured 3 GMAC/s single-threaded on every Lite0
layer (47% of a fused pass at batch 32): LLVM vectorizes its channel loop but leaves one
25-FMA dependency chain per vector (4-cycle latency each) or does not vectorize at all once the
5×5 taps are unrolled. Here the interior of the image (pixels whose k×k window lies inside
it, no padding taps) runs a kernel written as LLVM IR over ``<8 x float>``, like
``engine.kernels.panel_gemm``: a block of 4 adjacent output pixels × 16 channels keeps 8 independent
accumulators in registers; for each of the k·k taps (unrolled, k a compile-time constant) it
loads the tap's two weight vectors once and issues 8 FMAs against the 4 pixels' inputs
(memory operands), then bias + clip to [lo, hi] and one store per vector. A tail of 1–3 pixels
takes a 1-pixel block. 5×5 filters use blocks of 6 pixels (12 accumulators, see
``PIXELS_BY_KERNEL``). Border pixels (and channel counts that are not a multiple of 16) stay
with the numba kernel, which skips the rectangle done here.

Layout, channels last: for image ``n``, interior output row ``r``, pixel ``j``, tap (a, b),
channel ``c``: input ``x + n·ximg + r·xrstep + a·xrow + j·xpix + b·C + c``, weight
``w + (a·k + b)·wtap + c``, output ``out + n·oimg + r·orow + j·C + c`` (C = the channels of x
and out, a slice of the weight's ``wtap`` when the caller passes pointers offset by ``c0``).

The same driver and block shape also run a dense k×k conv over few input channels (the
stem, 3×3 over 3: ``dense_kernel``): there each tap is one input float broadcast to the 8
lanes and multiplied by the tap's row of the (KH·KW·Cin, Cout) weight, so no im2col patches
are written and the 27-long reduction that OpenBLAS runs at 43 GFLOP/s is 27 FMAs per
accumulator; the caller zero-pads each band of input rows first.

Trade-off: ~0.1 s of llvmlite compile at first use per filter size, AVX2+FMA hosts only (else
``kernel`` returns None and the numba kernel does everything), and float32 sums in tap order
(a, b) starting from the bias, as the numba kernel does (results agree to rounding).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from openhood.engine.kernels import call_list

LANES = 8  # floats per AVX vector
CHANNELS = 16  # channels per block: two vectors
PIXELS = 4  # output pixels per block: 4 × 2 = 8 accumulators
# Pixels per block of the k×k depthwise kernel where not PIXELS: a 5×5 block chains 25 FMAs per
# accumulator, and with 8 accumulators × 4 cycles of FMA latency the two FMA pipes have no
# slack; 6 pixels (12 accumulators + 2 weight vectors: 14 of the 16 ymm registers) give them
# some. Whole pass, same process, alternating, 5×5 at 4 → 6: batch 32 two threads median
# 318 → 303 ms, batch 1 one thread 15.70 → 15.57 ms. (3×3 layers measured level or slower.)
PIXELS_BY_KERNEL = {5: 6}

_DwFn = Callable[..., None]
_PROTO = call_list.prototype(call_list.DW)


def _block_ir(k: int, pixels: int, dense_span: int = 0) -> str:
    """@blk: ``pixels`` adjacent output pixels × all C channels, 16 at a time.

    ``dense_span`` > 0: a dense k-row conv instead (the stem, see ``dense_kernel``): tap (a, q)
    for q < dense_span is input float ``a·xrow + q`` of the window (a tap row is kw·Cin
    contiguous floats), broadcast to the 8 lanes and multiplied by the tap's output-channel
    vector ``w + (a·span + q)·wtap + c``."""
    v = "<8 x float>"
    lines = [
        f"define internal void @blk{pixels}(i64 %C, ptr noalias %x, i64 %xrow, i64 %xpix, ptr noalias %w,"
        f" i64 %wtap, ptr noalias %bias, ptr noalias %out, {v} %lo, {v} %hi) alwaysinline {{",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %cb = phi i64 [0, %entry], [%cb1, %loop]",
    ]
    for h in range(2):
        lines += [
            f"  %bo{h} = add i64 %cb, {LANES * h}",
            f"  %bp{h} = getelementptr float, ptr %bias, i64 %bo{h}",
            f"  %bv{h} = load {v}, ptr %bp{h}, align 4",
        ]
    acc = {(p, h): f"%bv{h}" for p in range(pixels) for h in range(2)}
    if dense_span:
        lines += _dense_taps_ir(k, dense_span, pixels, acc)
    for a in range(k if not dense_span else 0):
        for b in range(k):
            t = f"{a}_{b}"
            lines += [f"  %wo{t} = mul i64 %wtap, {a * k + b}", f"  %wc{t} = add i64 %wo{t}, %cb"]
            lines += [
                f"  %xa{t} = mul i64 %xrow, {a}",
                f"  %xb{t} = mul i64 %C, {b}",
                f"  %xo{t} = add i64 %xa{t}, %xb{t}",
            ]
            lines.append(f"  %xc{t} = add i64 %xo{t}, %cb")
            for h in range(2):
                lines += [
                    f"  %wi{t}_{h} = add i64 %wc{t}, {LANES * h}",
                    f"  %wp{t}_{h} = getelementptr float, ptr %w, i64 %wi{t}_{h}",
                    f"  %wv{t}_{h} = load {v}, ptr %wp{t}_{h}, align 4",
                ]
            for p in range(pixels):
                lines += [f"  %xq{t}_{p} = mul i64 %xpix, {p}", f"  %xr{t}_{p} = add i64 %xc{t}, %xq{t}_{p}"]
                for h in range(2):
                    s = f"{t}_{p}_{h}"
                    lines += [
                        f"  %xi{s} = add i64 %xr{t}_{p}, {LANES * h}",
                        f"  %xp{s} = getelementptr float, ptr %x, i64 %xi{s}",
                        f"  %xv{s} = load {v}, ptr %xp{s}, align 4",
                        f"  %ac{s} = call {v} @llvm.fma.v8f32({v} %xv{s}, {v} %wv{t}_{h}, {v} {acc[p, h]})",
                    ]
                    acc[p, h] = f"%ac{s}"
    for p in range(pixels):
        lines.append(f"  %oq{p} = mul i64 %C, {p}")
        for h in range(2):
            s = f"{p}_{h}"
            lines += [
                f"  %lt{s} = fcmp olt {v} {acc[p, h]}, %lo",
                f"  %mx{s} = select <8 x i1> %lt{s}, {v} %lo, {v} {acc[p, h]}",
                f"  %gt{s} = fcmp ogt {v} %mx{s}, %hi",
                f"  %cl{s} = select <8 x i1> %gt{s}, {v} %hi, {v} %mx{s}",
                f"  %oo{s} = add i64 %oq{p}, %cb",
                f"  %oi{s} = add i64 %oo{s}, {LANES * h}",
                f"  %op{s} = getelementptr float, ptr %out, i64 %oi{s}",
                f"  store {v} %cl{s}, ptr %op{s}, align 4",
            ]
    lines += [
        f"  %cb1 = add i64 %cb, {CHANNELS}",
        "  %more = icmp ult i64 %cb1, %C",
        "  br i1 %more, label %loop, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def _dense_taps_ir(k: int, span: int, pixels: int, acc: dict[tuple[int, int], str]) -> list[str]:
    """The FMAs of a dense block (``_block_ir`` with ``dense_span``): k·span taps, each one weight
    load per 8 output channels and one broadcast input float per pixel; updates ``acc``."""
    v = "<8 x float>"
    lines = []
    for a in range(k):
        for q in range(span):
            t = f"{a}_{q}"
            lines += [f"  %wo{t} = mul i64 %wtap, {a * span + q}", f"  %wc{t} = add i64 %wo{t}, %cb"]
            for h in range(2):
                lines += [
                    f"  %wi{t}_{h} = add i64 %wc{t}, {LANES * h}",
                    f"  %wp{t}_{h} = getelementptr float, ptr %w, i64 %wi{t}_{h}",
                    f"  %wv{t}_{h} = load {v}, ptr %wp{t}_{h}, align 4",
                ]
            lines.append(f"  %xa{t} = mul i64 %xrow, {a}")
            for p in range(pixels):
                s = f"{t}_{p}"
                lines += [
                    f"  %xq{s} = mul i64 %xpix, {p}",
                    f"  %xr{s} = add i64 %xa{t}, %xq{s}",
                    f"  %xi{s} = add i64 %xr{s}, {q}",
                    f"  %xp{s} = getelementptr float, ptr %x, i64 %xi{s}",
                    f"  %xf{s} = load float, ptr %xp{s}, align 4",
                    f"  %xe{s} = insertelement {v} poison, float %xf{s}, i64 0",
                    f"  %xv{s} = shufflevector {v} %xe{s}, {v} poison, <8 x i32> zeroinitializer",
                ]
                for h in range(2):
                    lines.append(
                        f"  %ac{s}_{h} = call {v} @llvm.fma.v8f32({v} %xv{s}, {v} %wv{t}_{h}, {v} {acc[p, h]})"
                    )
                    acc[p, h] = f"%ac{s}_{h}"
    return lines


def _driver_ir(pixels: int = PIXELS) -> str:
    """@dw: images × interior rows × blocks of ``pixels`` pixels, then single pixels."""
    v = "<8 x float>"
    args = "i64 %C, ptr %xp, i64 %xrow, i64 %xpix, ptr %w, i64 %wtap, ptr %bias"
    return "\n".join(
        [
            "define void @dw(i64 %N, i64 %R, i64 %J, i64 %C, ptr %x, i64 %ximg, i64 %xrstep, i64 %xrow,"
            " i64 %xpix, ptr %w, i64 %wtap, ptr %bias, ptr %out, i64 %oimg, i64 %orow, float %lo, float %hi) {",
            "entry:",
            f"  %loi = insertelement {v} poison, float %lo, i64 0",
            f"  %lov = shufflevector {v} %loi, {v} poison, <8 x i32> zeroinitializer",
            f"  %hii = insertelement {v} poison, float %hi, i64 0",
            f"  %hiv = shufflevector {v} %hii, {v} poison, <8 x i32> zeroinitializer",
            f"  %jq = udiv i64 %J, {pixels}",
            f"  %j4 = mul i64 %jq, {pixels}",
            "  br label %nloop",
            "nloop:",
            "  %n = phi i64 [0, %entry], [%n1, %nnext]",
            "  br label %rloop",
            "rloop:",
            "  %r = phi i64 [0, %nloop], [%r1, %rnext]",
            "  %xn = mul i64 %n, %ximg",
            "  %xr = mul i64 %r, %xrstep",
            "  %xo = add i64 %xn, %xr",
            "  %xbase = getelementptr float, ptr %x, i64 %xo",
            "  %on = mul i64 %n, %oimg",
            "  %or = mul i64 %r, %orow",
            "  %oo = add i64 %on, %or",
            "  %obase = getelementptr float, ptr %out, i64 %oo",
            "  %any4 = icmp ugt i64 %j4, 0",
            "  br i1 %any4, label %jloop, label %tailcheck",
            "jloop:",
            "  %j = phi i64 [0, %rloop], [%j1, %jloop]",
            "  %xj = mul i64 %j, %xpix",
            "  %xpj = getelementptr float, ptr %xbase, i64 %xj",
            "  %oj = mul i64 %j, %C",
            "  %opj = getelementptr float, ptr %obase, i64 %oj",
            f"  call void @blk{pixels}({args.replace('%xp,', '%xpj,')}, ptr %opj, {v} %lov, {v} %hiv)",
            f"  %j1 = add i64 %j, {pixels}",
            "  %jm = icmp ult i64 %j1, %j4",
            "  br i1 %jm, label %jloop, label %tailcheck",
            "tailcheck:",
            "  %anyt = icmp ult i64 %j4, %J",
            "  br i1 %anyt, label %tloop, label %rnext",
            "tloop:",
            "  %t = phi i64 [%j4, %tailcheck], [%t1, %tloop]",
            "  %xt = mul i64 %t, %xpix",
            "  %xpt = getelementptr float, ptr %xbase, i64 %xt",
            "  %ot = mul i64 %t, %C",
            "  %opt = getelementptr float, ptr %obase, i64 %ot",
            f"  call void @blk1({args.replace('%xp,', '%xpt,')}, ptr %opt, {v} %lov, {v} %hiv)",
            "  %t1 = add i64 %t, 1",
            "  %tm = icmp ult i64 %t1, %J",
            "  br i1 %tm, label %tloop, label %rnext",
            "rnext:",
            "  %r1 = add i64 %r, 1",
            "  %rm = icmp ult i64 %r1, %R",
            "  br i1 %rm, label %rloop, label %nnext",
            "nnext:",
            "  %n1 = add i64 %n, 1",
            "  %nm = icmp ult i64 %n1, %N",
            "  br i1 %nm, label %nloop, label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


def module_ir(k: int, dense_span: int = 0) -> str:
    """The LLVM module of the k×k kernel: the FMA intrinsic, the PIXELS- (or
    ``PIXELS_BY_KERNEL[k]``-) and 1-pixel blocks, @dw (``dense_span`` > 0: the dense conv of
    ``dense_kernel``, same driver, PIXELS)."""
    pixels = PIXELS if dense_span else PIXELS_BY_KERNEL.get(k, PIXELS)
    parts = ["declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)"]
    parts += [_block_ir(k, pixels, dense_span), _block_ir(k, 1, dense_span), _driver_ir(pixels)]
    return "\n\n".join(parts)


def _kernel(k: int, dense_span: int) -> _DwFn | None:
    """@dw of ``module_ir(k, dense_span)``, compiled once; None where it cannot run."""
    return call_list.jit_function(("dw", k, dense_span), "dw", _PROTO, module_ir, k, dense_span)


def kernel(k: int) -> _DwFn | None:
    """The compiled k×k interior kernel, or None where it cannot run (no AVX2/FMA, llvmlite
    failure): the numba kernel serves instead."""
    return _kernel(k, 0)


def dense_kernel(k: int, span: int) -> _DwFn | None:
    """A dense k×k conv with no im2col (the stem: 3×3 over 3 channels, ``span`` = k·Cin = 9),
    through the same driver as the depthwise kernel: 4 output pixels × 16 output channels in 8
    accumulators, k·span taps, each a broadcast input float × a vector of the (KH·KW·Cin, Cout)
    GEMM weight's row (rows in im2col's order). Arguments as ``dense``; None where it cannot run."""
    return _kernel(k, span)


def dense(
    fn: _DwFn,
    xp: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    stride: int,
    lo: float | np.float32,
    hi: float | np.float32,
    c0: int = 0,
) -> None:
    """out (R, OW, CO) ← clip(conv(xp) + bias, lo, hi) for a zero-padded band xp (HP, WP, Cin)
    whose row ``r·stride`` is output row r's first tap row and column ``j·stride`` output column
    j's first; weight (KH·KW·Cin, Cout) and bias (Cout,) of which output channels [c0, c0 + CO)
    are used, CO a multiple of 16."""
    r, ow, cout = out.shape
    c = xp.shape[2]
    xrow = xp.shape[1] * c
    fs = 4  # bytes per float
    fn(
        1,
        r,
        ow,
        cout,
        xp.ctypes.data,
        0,
        stride * xrow,
        xrow,
        stride * c,
        weight.ctypes.data + fs * c0,
        weight.shape[1],
        bias.ctypes.data + fs * c0,
        out.ctypes.data,
        0,
        ow * cout,
        lo,
        hi,
    )


def interior_columns(w: int, k: int, stride: int, pad_left: int) -> tuple[int, int]:
    """Output columns [j0, j1) whose k-wide window lies inside a w-wide row (j0 >= j1: none)."""
    return -(-pad_left // stride), (w - k + pad_left) // stride + 1


def interior_rows(out_row0: int, rows: int, h: int, k: int, stride: int, pad_top: int) -> tuple[int, int]:
    """Of ``rows`` output rows starting at image row ``out_row0``: [i0, i1) (relative) whose window
    lies inside the h-high image."""
    lo = -(-pad_top // stride) - out_row0
    hi = (h - k + pad_top) // stride + 1 - out_row0
    return max(0, lo), min(rows, hi)


def interior_args(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    stride: int,
    lo: float | np.float32,
    hi: float | np.float32,
    c0: int,
    images: tuple[int, int],
    rows: tuple[int, int],
    cols: tuple[int, int],
    x_top: int = 0,
    x_left: int = 0,
) -> tuple[object, ...]:
    """The @dw arguments (``kernel(k)(*interior_args(...))``, or ``engine.kernels.call_list`` stores them
    for a later native call) of the interior rectangle images × rows × cols of ``out`` (N, OHX,
    OW, C), clipped to [lo, hi], from ``x`` (N, HX, W, C): output pixel (i, j)'s window starts at
    x's row ``x_top + i·stride`` and column ``x_left + j·stride`` (defaults: x is zero-padded,
    its row and column 0 are the first windows'); channel ``ch`` of x and out is channel
    ``c0 + ch`` of weight (k, k, CW) and bias (CW,). C must be a multiple of 16; every range
    non-empty and every window inside x."""
    n0, n1 = images
    i0, i1 = rows
    j0, j1 = cols
    c = x.shape[3]
    w, hx = x.shape[2], x.shape[1]
    oh, ow = out.shape[1], out.shape[2]
    xrow = w * c
    ih = x_top + i0 * stride  # x's row of the first window's top tap
    iw = x_left + j0 * stride
    xoff = ((n0 * hx + ih) * w + iw) * c
    ooff = ((n0 * oh + i0) * ow + j0) * c
    fs = 4  # bytes per float
    return (
        n1 - n0,
        i1 - i0,
        j1 - j0,
        c,
        x.ctypes.data + fs * xoff,
        hx * xrow,
        stride * xrow,
        xrow,
        stride * c,
        weight.ctypes.data + fs * c0,
        weight.shape[2],
        bias.ctypes.data + fs * c0,
        out.ctypes.data + fs * ooff,
        oh * ow * c,
        ow * c,
        lo,
        hi,
    )
