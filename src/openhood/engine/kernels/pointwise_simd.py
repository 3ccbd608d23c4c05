"""1×1 convolution (a GEMM on channels-last pixels) with bias, residual and clip in its store.

An MBConv block's expand and project convs are ``rows (M, K) @ W (K, N)`` with M the tile's
pixels (49 at 7×7, a few thousand at 56×56), K and N its 16..1280 channels. Through OpenBLAS
(one thread) those ran at 62–70 GFLOP/s inside the fused pass on the small maps (M = 49:
OpenBLAS blocks for large M) and each was followed by a second pass over the output for the
epilogue (bias, residual, ReLU6). Here the weight is packed once into 16-column panels
(``panel_gemm.pack_panels``: (N/16, K, 16)) and the 6-row × 16-column register tile of
``engine.kernels.panel_gemm`` runs the product; its epilogue is what a conv needs instead of the MLP's
(bias, then optionally + a residual row, then clip to [lo, hi]: ReLU6 or none) before the one
store. One thread per call (the callers split tiles among threads); ``ROWS_PER_CHUNK`` rows of
the input are swept against every panel before moving on, so they stay in L2.

Why a second micro-kernel beside ``panel_gemm``'s: that one's epilogue (ReLU / softmax codes)
and argument list are the MLP's ABI; a residual operand and a clip would change both. The
tile shape, packing and loop order are the same (see its docstring for the register budget).

Trade-off: the packed panels are a second copy of each 1×1 weight (Lite0: 13 MB), made at
first use; widths that are not a multiple of 16 (Lite0's 16, 24 and 40-channel projects)
are left to sgemm (``suits``), where a masked half-empty panel measured slower than OpenBLAS.
Float32 sums run in k order from zero, then + bias (+ residual): results differ from BLAS by
summation order only (tests bound it against ``pointwise_reference``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import numpy as np

from openhood.engine.kernels import call_list
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.panel_gemm import MR, NR, accumulate_ir, pack_panels

# Rows of the input swept against every panel before moving on: a 96 × 1152 float32 chunk is
# 442 KB, within a core's 1 MiB L2 beside one 72 KB panel.
ROWS_PER_CHUNK = 96

_PwFn = Callable[..., None]
_PROTO = call_list.prototype(call_list.PW)
_lock = threading.Lock()
_packed: weakref.WeakKeyDictionary[Linear, np.ndarray] = weakref.WeakKeyDictionary()  # layer → its panels


def _tile_ir(rows: int) -> str:
    """@tile{rows}: c[0:rows, 0:16] = clip(a[0:rows, :K] @ b (K, 16) + bias (+ r), lo, hi);
    one phi'd <8 x float> accumulator per row and half; ``%hasr`` false: no residual read.
    Row i is stored at c + i·ldc, plus ``tab[i]`` floats when ``%hast`` (a row-offset table)."""
    v = "<8 x float>"
    lines = [
        f"define internal void @tile{rows}(i64 %K, ptr noalias %a, i64 %lda, ptr noalias %b, ptr noalias %c,"
        f" i64 %ldc, ptr noalias %bias, ptr noalias %r, i64 %ldr, i1 %hasr, {v} %lo, {v} %hi, ptr noalias %tab,"
        " i1 %hast) alwaysinline {",
        *accumulate_ir(rows),
    ]
    for i in range(rows):
        for h in range(2):
            lines.append(f"  %vb{i}_{h} = fadd {v} %n{i}_{h}, %bv{h}")
    lines += ["  br i1 %hasr, label %res, label %clip", "res:"]
    for i in range(rows):
        lines.append(f"  %rr{i} = mul i64 %ldr, {i}")
        for h in range(2):
            t = f"{i}_{h}"
            lines += [
                f"  %rq{t} = add i64 %rr{i}, {8 * h}",
                f"  %rp{t} = getelementptr float, ptr %r, i64 %rq{t}",
                f"  %rv{t} = load {v}, ptr %rp{t}, align 4",
                f"  %va{t} = fadd {v} %vb{t}, %rv{t}",
            ]
    lines += ["  br label %clip", "clip:"]
    lines += [f"  %vs{i}_{h} = phi {v} [%vb{i}_{h}, %exit], [%va{i}_{h}, %res]" for i in range(rows) for h in range(2)]
    lines += ["  br i1 %hast, label %table, label %store", "table:"]
    for i in range(rows):
        lines += [f"  %tp{i} = getelementptr i64, ptr %tab, i64 {i}", f"  %tl{i} = load i64, ptr %tp{i}, align 8"]
    lines += ["  br label %store", "store:"]
    lines += [f"  %to{i} = phi i64 [0, %clip], [%tl{i}, %table]" for i in range(rows)]
    for i in range(rows):
        lines += [f"  %cm{i} = mul i64 %ldc, {i}", f"  %co{i} = add i64 %cm{i}, %to{i}"]
        for h in range(2):
            t = f"{i}_{h}"
            lines += [
                f"  %vl{t} = call {v} @llvm.maxnum.v8f32({v} %vs{t}, {v} %lo)",
                f"  %vh{t} = call {v} @llvm.minnum.v8f32({v} %vl{t}, {v} %hi)",
                f"  %cq{t} = add i64 %co{i}, {8 * h}",
                f"  %cp{t} = getelementptr float, ptr %c, i64 %cq{t}",
                f"  store {v} %vh{t}, ptr %cp{t}, align 4",
            ]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def _driver_ir() -> str:
    """@pw: chunks of MC rows × panels × 6-row blocks (then a 1..5-row tail block); chunk q's
    output starts ``q·cstep`` floats into c (MC·ldc: one matrix; more: a gap after each chunk)."""
    v = "<8 x float>"
    tails = " ".join(f"i64 {m}, label %t{m}" for m in range(1, MR))
    args = (
        "i64 %K, ptr %{a}, i64 %lda, ptr %bp, ptr %{c}, i64 %ldc, ptr %bq, ptr %{r}, i64 %ldr, i1 %hasr,"
        " {v} %lov, {v} %hiv, ptr %{t}, i1 %hast"
    )
    lines = [
        "define void @pw(i64 %M, i64 %N, i64 %K, ptr %a, i64 %lda, ptr %b, i64 %pstride, ptr %c, i64 %ldc,"
        " ptr %bias, ptr %r, i64 %ldr, float %lo, float %hi, i64 %MC, i64 %cstep, ptr %tab) {",
        "entry:",
        f"  %loi = insertelement {v} poison, float %lo, i64 0",
        f"  %lov = shufflevector {v} %loi, {v} poison, <8 x i32> zeroinitializer",
        f"  %hii = insertelement {v} poison, float %hi, i64 0",
        f"  %hiv = shufflevector {v} %hii, {v} poison, <8 x i32> zeroinitializer",
        "  %hasr = icmp ne ptr %r, null",
        "  %hast = icmp ne ptr %tab, null",
        f"  %NP = udiv i64 %N, {NR}",
        "  %empty = icmp eq i64 %M, 0",
        "  br i1 %empty, label %done, label %chunk",
        "chunk:",
        "  %r0 = phi i64 [0, %entry], [%r0n, %cnext]",
        "  %q = phi i64 [0, %entry], [%qn, %cnext]",
        "  %left = sub i64 %M, %r0",
        "  %small = icmp ult i64 %left, %MC",
        "  %m = select i1 %small, i64 %left, i64 %MC",
        f"  %full = udiv i64 %m, {MR}",
        f"  %mfull = mul i64 %full, {MR}",
        "  %rest = sub i64 %m, %mfull",
        "  %ca0 = mul i64 %r0, %lda",
        "  %achunk = getelementptr float, ptr %a, i64 %ca0",
        "  %cc0 = mul i64 %q, %cstep",
        "  %cchunk = getelementptr float, ptr %c, i64 %cc0",
        "  %cr0 = mul i64 %r0, %ldr",
        "  %rchunk = getelementptr float, ptr %r, i64 %cr0",
        "  %tchunk = getelementptr i64, ptr %tab, i64 %r0",
        "  br label %ploop",
        "ploop:",
        "  %p = phi i64 [0, %chunk], [%p1, %pnext]",
        "  %boff = mul i64 %p, %pstride",
        "  %bp = getelementptr float, ptr %b, i64 %boff",
        f"  %coff = mul i64 %p, {NR}",
        "  %cp = getelementptr float, ptr %cchunk, i64 %coff",
        "  %rp = getelementptr float, ptr %rchunk, i64 %coff",
        "  %bq = getelementptr float, ptr %bias, i64 %coff",
        "  %none = icmp eq i64 %full, 0",
        "  br i1 %none, label %tail, label %iloop",
        "iloop:",
        "  %i = phi i64 [0, %ploop], [%i1, %iloop]",
        "  %ar = mul i64 %i, %lda",
        "  %ap = getelementptr float, ptr %achunk, i64 %ar",
        "  %cr = mul i64 %i, %ldc",
        "  %cpi = getelementptr float, ptr %cp, i64 %cr",
        "  %rr = mul i64 %i, %ldr",
        "  %rpi = getelementptr float, ptr %rp, i64 %rr",
        "  %tpi = getelementptr i64, ptr %tchunk, i64 %i",
        f"  call void @tile{MR}({args.format(a='ap', c='cpi', r='rpi', v=v, t='tpi')})",
        f"  %i1 = add i64 %i, {MR}",
        "  %im = icmp ult i64 %i1, %mfull",
        "  br i1 %im, label %iloop, label %tail",
        "tail:",
        "  %tar = mul i64 %mfull, %lda",
        "  %tap = getelementptr float, ptr %achunk, i64 %tar",
        "  %tcr = mul i64 %mfull, %ldc",
        "  %tcp = getelementptr float, ptr %cp, i64 %tcr",
        "  %trr = mul i64 %mfull, %ldr",
        "  %trp = getelementptr float, ptr %rp, i64 %trr",
        "  %ttp = getelementptr i64, ptr %tchunk, i64 %mfull",
        f"  switch i64 %rest, label %pnext [{tails}]",
    ]
    for m in range(1, MR):
        lines += [
            f"t{m}:",
            f"  call void @tile{m}({args.format(a='tap', c='tcp', r='trp', v=v, t='ttp')})",
            "  br label %pnext",
        ]
    lines += [
        "pnext:",
        "  %p1 = add i64 %p, 1",
        "  %pm = icmp ult i64 %p1, %NP",
        "  br i1 %pm, label %ploop, label %cnext",
        "cnext:",
        "  %r0n = add i64 %r0, %MC",
        "  %qn = add i64 %q, 1",
        "  %cm = icmp ult i64 %r0n, %M",
        "  br i1 %cm, label %chunk, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def module_ir() -> str:
    """The LLVM module: intrinsics, tiles of 1..6 rows, the driver @pw."""
    parts = [
        "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)",
        "declare <8 x float> @llvm.maxnum.v8f32(<8 x float>, <8 x float>)",
        "declare <8 x float> @llvm.minnum.v8f32(<8 x float>, <8 x float>)",
    ]
    parts += [_tile_ir(rows) for rows in range(1, MR + 1)]
    parts.append(_driver_ir())
    return "\n\n".join(parts)


def kernel() -> _PwFn | None:
    """The compiled @pw, or None where it cannot run (no AVX2/FMA, llvmlite failure): sgemm serves instead."""
    return call_list.jit_function("pw", "pw", _PROTO, module_ir)


def suits(linear: Linear) -> bool:
    """Whether ``linear``'s 1×1 conv runs here: float32 weight, output width a multiple of 16, a kernel."""
    w = linear.weight
    return w.dtype == np.float32 and w.ndim == 2 and w.shape[1] % NR == 0 and kernel() is not None


def panels(linear: Linear) -> np.ndarray:
    """``linear``'s weight packed into (N/16, K, 16) panels, once per layer (kept while it lives)."""
    packed = _packed.get(linear)
    if packed is None:
        packed = pack_panels(np.ascontiguousarray(linear.weight, dtype=np.float32))
        with _lock:
            _packed[linear] = packed
    return packed


def pointwise_args(
    x: np.ndarray,
    packed: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    lo: float | np.float32,
    hi: float | np.float32,
    residual: np.ndarray | None = None,
    c0: int = 0,
    rows_at: np.ndarray | None = None,
    k0: int = 0,
) -> tuple[object, ...]:
    """The @pw arguments of out (M, NO) ← clip(x (M, K') @ W[:, c0:c0+NO] + bias[c0:c0+NO]
    (+ residual (M, NO)), lo, hi): ``kernel()(*pointwise_args(...))`` runs it, or
    ``engine.kernels.call_list`` stores them for a later native call.

    ``packed`` = ``panels(linear)`` of the full (K, N) weight; its output columns [c0, c0 + NO)
    and input rows [k0, k0 + K') are used (c0 and NO multiples of 16; K' = x's width, all of K
    unless a partial product over a slice of the inputs is wanted). x's rows may be strided
    (row step ``x.strides[0]``, unit column step) and so may out's and the residual's.

    ``rows_at`` (M,) int64: row i of the product is stored ``rows_at[i]`` floats after out's
    first element instead (``out`` is then any array giving that base and the width NO, e.g.
    a zero-padded image buffer whose pad columns the rows skip; no residual)."""
    m, k = x.shape
    no = out.shape[1] if out.ndim == 2 else out.shape[-1]
    fs = 4  # bytes per float
    ldc = out.strides[0] // fs
    if rows_at is not None:
        if residual is not None or rows_at.shape != (m,) or rows_at.dtype != np.int64:
            raise ValueError("rows_at must be an (M,) int64 table and takes no residual")
        ldc = 0
    r_ptr, ldr = (None, 0) if residual is None else (residual.ctypes.data, residual.strides[0] // fs)
    return (
        m,
        no,
        k,
        x.ctypes.data,
        x.strides[0] // fs,
        packed.ctypes.data + fs * ((c0 // NR) * packed.shape[1] + k0) * NR,
        packed.shape[1] * NR,
        out.ctypes.data,
        ldc,
        bias.ctypes.data + fs * c0,
        r_ptr,
        ldr,
        lo,
        hi,
        ROWS_PER_CHUNK,
        ROWS_PER_CHUNK * ldc,
        None if rows_at is None else rows_at.ctypes.data,
    )


def pointwise_reference(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    lo: float,
    hi: float,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """The naive definition, float64: clip(x @ weight + bias (+ residual), lo, hi)."""
    y = np.asarray(x, np.float64) @ np.asarray(weight, np.float64) + np.asarray(bias, np.float64)
    if residual is not None:
        y = y + residual
    return np.asarray(np.clip(y, lo, hi))
