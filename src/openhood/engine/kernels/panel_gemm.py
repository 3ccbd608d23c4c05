"""float32 GEMM against a weight packed once into 16-column panels: a 6×16 register-tile kernel.

``x (M, K) @ W (K, N)`` through OpenBLAS packs ``W`` again on every call (the 784×256 first
layer of the MLP: 800 KB copied per call, the whole point of ONNX Runtime's pre-packed MLAS
weights). Here ``W`` is packed ONCE at load into panels ``(N/16, K, 16)``: the 16 columns of a
panel for one ``k`` are 64 contiguous bytes, two AVX vectors. The micro-kernel keeps a 6-row ×
16-column tile of the output in 12 vector registers, and for each ``k`` loads the two panel
vectors, broadcasts ``x[i..i+5, k]`` and issues 12 FMAs (the BLIS/MLAS "6×16" AVX2 shape:
12 accumulators + 2 panel vectors + 1 broadcast = 15 of the 16 ymm registers). The driver walks
chunks of ``ROWS_PER_CHUNK`` rows (kept in L2), and within a chunk each panel, and within a
panel each 6-row block; a tail of 1–5 rows gets a kernel of its own height.

The epilogue runs on the tile while it is still in registers, before its one store: + bias,
then ReLU, or softmax when one panel holds the whole row (a ≤ 16-class head; exp as in
``engine.kernels.numba_rows``: 2^n · a degree-7 polynomial). A width that is not a multiple of 16 stores
its last panel with a lane mask straight into the (M, N) output. ``PanelLinear.fused_forward``
makes Linear+ReLU and Linear+Softmax ONE ctypes call each (the layer's constants in a prebuilt
int64 descriptor, 5 arguments), where ``matmul`` + the row kernels of ``engine.kernels.ops`` were a
GEMM, a scratch copy and a numba dispatch per layer (~20 µs of Python at batch 64).

Why LLVM IR and not numba: numba's auto-vectorizer only produced the dot-product form (a
horizontal sum per output, 2×4 tiles, ~80 GFLOP/s here, no faster than OpenBLAS); it never
vectorized the outer-product form, which needs explicit ``<8 x float>`` values. The kernel is
therefore LLVM IR text generated below (~120 lines of Python), compiled once per process by llvmlite
(numba's own LLVM, already a dependency) for the host CPU, and called through ctypes (which
releases the GIL). The trade-off: a ~0.1 s compile at first use, a second copy of the weight in
memory (the plain ``(in, out)`` one is kept for export and for the BLAS fallback), one thread
only (``PanelLinear`` hands multi-threaded BLAS configurations back to ``np.matmul``), and
results that differ from BLAS by float32 summation order (``k`` ascending, one FMA chain per
output; the tests bound it against ``panel_matmul_reference``).
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple, cast

import numpy as np

from openhood.engine.kernels.blas import blas
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.llvm_jit import jit_module
from openhood.engine.kernels.ops import relu_naive, softmax_naive

NR = 16  # columns per panel: two 8-float AVX vectors
MR = 6  # rows per register tile: 12 accumulators
ROWS_PER_CHUNK = 96  # rows of x swept against every panel before moving on (96 × 784 × 4 B = 300 KB, in L2)
MIN_ROWS = 2  # matmul alone: a single row is a GEMV, memory-bound, BLAS's is as good (fused_forward takes it)

# Epilogue codes of the kernel (``act``): what happens to the register tile before its store.
ACT_NONE, ACT_BIAS, ACT_RELU, ACT_SOFTMAX = 0, 1, 2, 3
ACTIVATION_CODES = {None: ACT_BIAS, "relu": ACT_RELU, "softmax": ACT_SOFTMAX}

_GemmFn = Callable[[int, int, int, int, int, int, int, int, int, int | None, int], None]
_LayerFn = Callable[[int, int, int, int, int], None]
_lock = threading.Lock()
_compiled: list[_Kernels | None] = []  # [] = not tried yet; [None] = unavailable on this machine


def pack_panels(w: np.ndarray) -> np.ndarray:
    """(K, N) float32 → (ceil(N/16), K, 16) panels, columns past N zero."""
    k, n = w.shape
    n_panels = -(-n // NR)
    padded = np.zeros((k, n_panels * NR), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, n_panels, NR).transpose(1, 0, 2))


def panel_matmul_reference(x: np.ndarray, panels: np.ndarray, n: int) -> np.ndarray:
    """The naive reference: unpack the panels and multiply in float64, (M, n) float32."""
    n_panels, k, _ = panels.shape
    w = panels.transpose(1, 0, 2).reshape(k, n_panels * NR)[:, :n]  # (K, N)
    return (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)


def _f32(value: float) -> str:
    """An LLVM float literal: the float32 value as the hex of its exact double."""
    bits = struct.unpack("<Q", struct.pack("<d", float(np.float32(value))))[0]
    return f"0x{bits:016X}"


def _splat(value: float | str, ty: str = "float") -> str:
    literal = _f32(value) if ty == "float" and not isinstance(value, str) else value
    return "<" + ", ".join([f"{ty} {literal}"] * 8) + ">"


_NEG_INF = "0xFFF0000000000000"
_LOG2E = 1.0 / math.log(2.0)
_EXP_TAYLOR = [math.log(2.0) ** k / math.factorial(k) for k in range(8)]  # 2^f = sum (f ln2)^k / k!
_EXP2_MIN = -126.0


def _softmax_row_ir(r: int) -> list[str]:
    """%s{r}_0, %s{r}_1 = softmax over the row's ``cols`` valid lanes of %v{r}_0, %v{r}_1 (the
    exp of ``engine.kernels.numba_rows._softmax_rows``: 2^n · Taylor(2^f), flushed to 0 below 2^-126)."""
    lines = [
        f"  %sa{r}_0 = select <8 x i1> %mask0, <8 x float> %v{r}_0, <8 x float> {_splat(_NEG_INF)}",
        f"  %sa{r}_1 = select <8 x i1> %mask1, <8 x float> %v{r}_1, <8 x float> {_splat(_NEG_INF)}",
        f"  %mx{r} = call <8 x float> @llvm.maxnum.v8f32(<8 x float> %sa{r}_0, <8 x float> %sa{r}_1)",
        f"  %m{r} = call float @llvm.vector.reduce.fmax.v8f32(<8 x float> %mx{r})",
        f"  %mi{r} = insertelement <8 x float> poison, float %m{r}, i64 0",
        f"  %ms{r} = shufflevector <8 x float> %mi{r}, <8 x float> poison, <8 x i32> zeroinitializer",
    ]
    for h in range(2):
        t = f"{r}_{h}"
        lines += [
            f"  %d{t} = fsub <8 x float> %sa{t}, %ms{r}",
            f"  %zl{t} = fmul <8 x float> %d{t}, {_splat(_LOG2E)}",
            f"  %z{t} = call <8 x float> @llvm.maxnum.v8f32(<8 x float> %zl{t}, <8 x float> {_splat(_EXP2_MIN)})",
            f"  %zh{t} = fadd <8 x float> %z{t}, {_splat(0.5)}",
            f"  %nf{t} = call <8 x float> @llvm.floor.v8f32(<8 x float> %zh{t})",
            f"  %f{t} = fsub <8 x float> %z{t}, %nf{t}",
        ]
        poly = _splat(_EXP_TAYLOR[7])
        for k in range(6, -1, -1):
            lines.append(
                f"  %p{k}_{t} = call <8 x float> @llvm.fma.v8f32(<8 x float> {poly}, <8 x float> %f{t},"
                f" <8 x float> {_splat(_EXP_TAYLOR[k])})"
            )
            poly = f"%p{k}_{t}"
        lines += [
            f"  %ni{t} = fptosi <8 x float> %nf{t} to <8 x i32>",
            f"  %ne{t} = add <8 x i32> %ni{t}, {_splat('127', 'i32')}",
            f"  %nb{t} = shl <8 x i32> %ne{t}, {_splat('23', 'i32')}",
            f"  %two{t} = bitcast <8 x i32> %nb{t} to <8 x float>",
            f"  %ok{t} = fcmp ogt <8 x float> %z{t}, {_splat(_EXP2_MIN)}",
            f"  %tw{t} = select <8 x i1> %ok{t}, <8 x float> %two{t}, <8 x float> zeroinitializer",
            f"  %e{t} = fmul <8 x float> %p0_{t}, %tw{t}",
        ]
    lines += [
        f"  %es{r} = fadd <8 x float> %e{r}_0, %e{r}_1",
        f"  %sum{r} = call reassoc float @llvm.vector.reduce.fadd.v8f32(float -0.0, <8 x float> %es{r})",
        f"  %inv{r} = fdiv float 1.0, %sum{r}",
        f"  %ii{r} = insertelement <8 x float> poison, float %inv{r}, i64 0",
        f"  %is{r} = shufflevector <8 x float> %ii{r}, <8 x float> poison, <8 x i32> zeroinitializer",
        f"  %s{r}_0 = fmul <8 x float> %e{r}_0, %is{r}",
        f"  %s{r}_1 = fmul <8 x float> %e{r}_1, %is{r}",
    ]
    return lines


def accumulate_ir(rows: int) -> list[str]:
    """The register tile's body, shared by every kernel built on these panels: blocks ``entry``,
    ``loop`` and the start of ``exit`` of a function with arguments ``%K``, ``%a``, ``%lda``
    (rows of A, float stride), ``%b`` (one packed (K, 16) panel) and ``%bias`` (16 floats).

    Leaves ``%n{r}_{h}`` = a[r, :K] @ b[:, 8h:8h+8] (one phi'd <8 x float> accumulator per row
    and half, one broadcast of a[r, k] and two FMAs per k) and the bias halves ``%bv0``,
    ``%bv1`` loaded; the caller's epilogue continues in ``exit``."""
    v = "<8 x float>"
    lines = ["entry:", "  br label %loop", "loop:", "  %k = phi i64 [0, %entry], [%k1, %loop]"]
    for r in range(rows):
        for h in range(2):
            lines.append(f"  %acc{r}_{h} = phi {v} [zeroinitializer, %entry], [%n{r}_{h}, %loop]")
    lines += [
        f"  %boff = mul i64 %k, {NR}",
        "  %bp0 = getelementptr float, ptr %b, i64 %boff",
        "  %bp1 = getelementptr float, ptr %bp0, i64 8",
        f"  %b0 = load {v}, ptr %bp0, align 4",
        f"  %b1 = load {v}, ptr %bp1, align 4",
    ]
    for r in range(rows):
        lines += [
            f"  %ro{r} = mul i64 %lda, {r}",
            f"  %ai{r} = add i64 %ro{r}, %k",
            f"  %ap{r} = getelementptr float, ptr %a, i64 %ai{r}",
            f"  %as{r} = load float, ptr %ap{r}, align 4",
            f"  %av{r}i = insertelement {v} poison, float %as{r}, i64 0",
            f"  %av{r} = shufflevector {v} %av{r}i, {v} poison, <8 x i32> zeroinitializer",
        ]
        for h in range(2):
            lines.append(f"  %n{r}_{h} = call {v} @llvm.fma.v8f32({v} %av{r}, {v} %b{h}, {v} %acc{r}_{h})")
    lines += [
        "  %k1 = add i64 %k, 1",
        "  %more = icmp ult i64 %k1, %K",
        "  br i1 %more, label %loop, label %exit",
        "exit:",
        f"  %bv0 = load {v}, ptr %bias, align 4",
        "  %bq1 = getelementptr float, ptr %bias, i64 8",
        f"  %bv1 = load {v}, ptr %bq1, align 4",
    ]
    return lines


def _micro_kernel_ir(rows: int) -> str:
    """c[0:rows, 0:cols] = epilogue(a[0:rows, 0:K] @ b (K, 16) + bias (16,)): one phi'd
    <8 x float> accumulator per row and half; the epilogue runs on the registers before the store.

    ``act``: 0 product only (``bias`` is a zero row), 1 + bias, 2 + bias then ReLU, 3 + bias then
    softmax over the row's ``cols`` valid columns (one panel holds the whole row). ``cols`` < 16
    (the last panel of a width that is not a multiple of 16) stores with a lane mask, so ``c`` is
    the caller's (M, N) array itself, no padded scratch.
    """
    lines = [
        f"define internal void @tile{rows}(i64 %K, ptr noalias %a, i64 %lda, ptr noalias %b, ptr noalias %c,"
        " i64 %ldc, ptr noalias %bias, i64 %act, i64 %cols) alwaysinline {",
        *accumulate_ir(rows),
        f"  %relu = icmp eq i64 %act, {ACT_RELU}",
        "  %c32 = trunc i64 %cols to i32",
        "  %cv = insertelement <8 x i32> poison, i32 %c32, i64 0",
        "  %cs = shufflevector <8 x i32> %cv, <8 x i32> poison, <8 x i32> zeroinitializer",
        "  %mask0 = icmp ult <8 x i32> <" + ", ".join(f"i32 {j}" for j in range(8)) + ">, %cs",
        "  %mask1 = icmp ult <8 x i32> <" + ", ".join(f"i32 {j}" for j in range(8, 16)) + ">, %cs",
    ]
    for r in range(rows):
        for h in range(2):
            t = f"{r}_{h}"
            lines += [
                f"  %vb{t} = fadd <8 x float> %n{t}, %bv{h}",
                f"  %vr{t} = call <8 x float> @llvm.maxnum.v8f32(<8 x float> %vb{t}, <8 x float> zeroinitializer)",
                f"  %v{t} = select i1 %relu, <8 x float> %vr{t}, <8 x float> %vb{t}",
            ]
    lines += [f"  %sm = icmp eq i64 %act, {ACT_SOFTMAX}", "  br i1 %sm, label %softmax, label %store", "softmax:"]
    for r in range(rows):
        lines += _softmax_row_ir(r)
    lines += ["  br label %store", "store:"]
    for r in range(rows):
        for h in range(2):
            lines.append(f"  %o{r}_{h} = phi <8 x float> [%v{r}_{h}, %exit], [%s{r}_{h}, %softmax]")
    lines += [f"  %whole = icmp eq i64 %cols, {NR}", "  br i1 %whole, label %stwhole, label %stpart"]
    for block in ("stwhole", "stpart"):
        lines.append(f"{block}:")
        for r in range(rows):
            lines.append(f"  %co{r}{block} = mul i64 %ldc, {r}")
            for h in range(2):
                t = f"{r}_{h}{block}"
                lines += [
                    f"  %cq{t} = add i64 %co{r}{block}, {8 * h}",
                    f"  %cp{t} = getelementptr float, ptr %c, i64 %cq{t}",
                    f"  store <8 x float> %o{r}_{h}, ptr %cp{t}, align 4"
                    if block == "stwhole"
                    else f"  call void @llvm.masked.store.v8f32.p0(<8 x float> %o{r}_{h}, ptr %cp{t}, i32 4,"
                    f" <8 x i1> %mask{h})",
                ]
        lines.append("  ret void")
    lines.append("}")
    return "\n".join(lines)


def _driver_ir() -> str:
    """@chunk: every panel × every 6-row block of up to ROWS_PER_CHUNK rows; @gemm: the chunks;
    @layer: @gemm with a layer's constants read from its descriptor (5 ctypes arguments, not 11)."""
    tails = " ".join(f"i64 {m}, label %t{m}" for m in range(1, MR))
    tile_args = "i64 %K, ptr %{a}, i64 %lda, ptr %bp, ptr %{c}, i64 %ldc, ptr %bsel, i64 %act, i64 %cols"
    lines = [
        "define internal void @chunk(i64 %M, i64 %N, i64 %K, ptr %a, i64 %lda, ptr %b, ptr %c, i64 %ldc,"
        " ptr %bias, i64 %act) {",
        "entry:",
        f"  %full = udiv i64 %M, {MR}",
        f"  %mfull = mul i64 %full, {MR}",
        "  %rest = sub i64 %M, %mfull",
        f"  %np0 = add i64 %N, {NR - 1}",
        f"  %NP = udiv i64 %np0, {NR}",
        f"  %pstride = mul i64 %K, {NR}",
        "  %hasb = icmp ne i64 %act, 0",
        "  br label %ploop",
        "ploop:",
        "  %p = phi i64 [0, %entry], [%p1, %pnext]",
        "  %boff = mul i64 %p, %pstride",
        "  %bp = getelementptr float, ptr %b, i64 %boff",
        f"  %coff = mul i64 %p, {NR}",
        "  %cp = getelementptr float, ptr %c, i64 %coff",
        "  %bq = getelementptr float, ptr %bias, i64 %coff",
        "  %bsel = select i1 %hasb, ptr %bq, ptr @zeros",
        "  %left = sub i64 %N, %coff",
        f"  %narrow = icmp ult i64 %left, {NR}",
        f"  %cols = select i1 %narrow, i64 %left, i64 {NR}",
        "  %none = icmp eq i64 %full, 0",
        "  br i1 %none, label %tail, label %iloop",
        "iloop:",
        "  %i = phi i64 [0, %ploop], [%i1, %iloop]",
        "  %ar = mul i64 %i, %lda",
        "  %ap = getelementptr float, ptr %a, i64 %ar",
        "  %cr = mul i64 %i, %ldc",
        "  %cpi = getelementptr float, ptr %cp, i64 %cr",
        f"  call void @tile{MR}({tile_args.format(a='ap', c='cpi')})",
        f"  %i1 = add i64 %i, {MR}",
        "  %im = icmp ult i64 %i1, %mfull",
        "  br i1 %im, label %iloop, label %tail",
        "tail:",
        "  %tar = mul i64 %mfull, %lda",
        "  %tap = getelementptr float, ptr %a, i64 %tar",
        "  %tcr = mul i64 %mfull, %ldc",
        "  %tcp = getelementptr float, ptr %cp, i64 %tcr",
        f"  switch i64 %rest, label %pnext [{tails}]",
    ]
    for m in range(1, MR):
        lines += [f"t{m}:", f"  call void @tile{m}({tile_args.format(a='tap', c='tcp')})", "  br label %pnext"]
    lines += [
        "pnext:",
        "  %p1 = add i64 %p, 1",
        "  %pm = icmp ult i64 %p1, %NP",
        "  br i1 %pm, label %ploop, label %done",
        "done:",
        "  ret void",
        "}",
        "",
        "define void @gemm(i64 %M, i64 %N, i64 %K, ptr %a, i64 %lda, ptr %b, ptr %c, i64 %ldc, i64 %MC,"
        " ptr %bias, i64 %act) {",
        "entry:",
        "  %empty = icmp eq i64 %M, 0",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %r = phi i64 [0, %entry], [%r1, %loop]",
        "  %left = sub i64 %M, %r",
        "  %small = icmp ult i64 %left, %MC",
        "  %m = select i1 %small, i64 %left, i64 %MC",
        "  %ao = mul i64 %r, %lda",
        "  %ap = getelementptr float, ptr %a, i64 %ao",
        "  %co = mul i64 %r, %ldc",
        "  %cp = getelementptr float, ptr %c, i64 %co",
        "  call void @chunk(i64 %m, i64 %N, i64 %K, ptr %ap, i64 %lda, ptr %b, ptr %cp, i64 %ldc, ptr %bias, i64 %act)",
        "  %r1 = add i64 %r, %MC",
        "  %more = icmp ult i64 %r1, %M",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
        "",
        "define void @layer(ptr %desc, i64 %M, ptr %a, ptr %c, i64 %act) {",
        "entry:",
    ]
    for i, field in enumerate(_DESC_FIELDS):
        lines += [
            f"  %q{field} = getelementptr i64, ptr %desc, i64 {i}",
            f"  %{field} = load i64, ptr %q{field}, align 8",
        ]
    lines += [
        "  %b = inttoptr i64 %panels to ptr",
        "  %bias = inttoptr i64 %biasp to ptr",
        "  call void @gemm(i64 %M, i64 %N, i64 %K, ptr %a, i64 %K, ptr %b, ptr %c, i64 %N, i64 %MC, ptr %bias, i64 %act)",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


_DESC_FIELDS = ("N", "K", "panels", "biasp", "MC")  # a layer's descriptor: int64 (5,)


def module_ir() -> str:
    """The whole LLVM module: the intrinsics, the zero bias row, tiles of 1..6 rows, the drivers."""
    parts = [
        "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)",
        "declare <8 x float> @llvm.maxnum.v8f32(<8 x float>, <8 x float>)",
        "declare <8 x float> @llvm.floor.v8f32(<8 x float>)",
        "declare float @llvm.vector.reduce.fmax.v8f32(<8 x float>)",
        "declare float @llvm.vector.reduce.fadd.v8f32(float, <8 x float>)",
        "declare void @llvm.masked.store.v8f32.p0(<8 x float>, ptr, i32, <8 x i1>)",
        f"@zeros = internal constant [{NR} x float] zeroinitializer, align 32",
    ]
    parts += [_micro_kernel_ir(rows) for rows in range(1, MR + 1)]
    parts.append(_driver_ir())
    return "\n\n".join(parts)


class _Kernels(NamedTuple):
    gemm: _GemmFn  # (M, N, K, a, lda, b, c, ldc, MC, bias, act)
    layer: _LayerFn  # (desc, M, a, c, act)


def _compile() -> _Kernels | None:
    address = jit_module(module_ir())
    if address is None:
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    gemm = ctypes.CFUNCTYPE(None, i64, i64, i64, ptr, i64, ptr, ptr, i64, i64, ptr, i64)(address("gemm"))
    layer = ctypes.CFUNCTYPE(None, ptr, i64, ptr, ptr, i64)(address("layer"))
    return _Kernels(cast(_GemmFn, gemm), cast(_LayerFn, layer))


def _kernels() -> _Kernels | None:
    with _lock:
        if not _compiled:
            try:
                _compiled.append(_compile())
            except Exception:  # a missing target or a JIT failure: BLAS serves instead
                _compiled.append(None)
        return _compiled[0]


def gemm_kernel() -> _GemmFn | None:
    """The compiled kernel, or None where it cannot run (no AVX2/FMA, llvmlite failure)."""
    kernels = _kernels()
    return kernels.gemm if kernels is not None else None


def _check(x: np.ndarray, panels: np.ndarray, n: int, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """x as C-contiguous float32 (M, K) and the (M, n) output, after checking every shape."""
    n_panels, k, _ = panels.shape
    width = n_panels * NR
    if not width - NR < n <= width:
        raise ValueError(f"{n_panels} panels hold {width - NR + 1}..{width} columns, not {n}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    m = x.shape[0]
    if x.shape != (m, k):
        raise ValueError(f"x has shape {x.shape}, the panels take (M, {k})")
    if out is None:
        out = np.empty((m, n), np.float32)
    elif out.shape != (m, n) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 ({m}, {n}) array")
    return x, out


def panel_matmul(x: np.ndarray, panels: np.ndarray, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """``x (M, K) @ W`` for ``panels = pack_panels(W)`` and W's ``n`` columns; (M, n) float32.

    When ``n`` is not a multiple of 16 (a 10-class head) the last panel's tiles store with a
    lane mask straight into ``out``.
    """
    fn = gemm_kernel()
    if fn is None:
        raise RuntimeError("panel_matmul needs the compiled kernel (see gemm_kernel)")
    x, out = _check(x, panels, n, out)
    m, k = x.shape
    fn(m, n, k, x.ctypes.data, k, panels.ctypes.data, out.ctypes.data, n, ROWS_PER_CHUNK, None, ACT_NONE)
    return out


def pad_bias(bias: np.ndarray | None, n: int) -> np.ndarray:
    """(n,) bias or None → (ceil(n/16)·16,) float32, zeros past n: every panel reads 16 floats."""
    padded = np.zeros(-(-n // NR) * NR, np.float32)
    if bias is not None:
        padded[:n] = bias
    return padded


def panel_linear(
    x: np.ndarray,
    panels: np.ndarray,
    n: int,
    bias: np.ndarray | None,
    activation: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``activation(x @ W + bias)`` in one kernel call, the epilogue on the register tile;
    activation None, "relu" or "softmax" (softmax: n ≤ 16, one panel holds the row); (M, n)."""
    kernels = _kernels()
    if kernels is None:
        raise RuntimeError("panel_linear needs the compiled kernel (see gemm_kernel)")
    act = ACTIVATION_CODES[activation]
    if act == ACT_SOFTMAX and n > NR:
        raise ValueError(f"the softmax epilogue needs the whole row in one panel (≤ {NR} columns), not {n}")
    x, out = _check(x, panels, n, out)
    m, k = x.shape
    padded = pad_bias(bias, n)
    kernels.gemm(
        m, n, k, x.ctypes.data, k, panels.ctypes.data, out.ctypes.data, n, ROWS_PER_CHUNK, padded.ctypes.data, act
    )
    return out


def panel_linear_reference(
    x: np.ndarray, panels: np.ndarray, n: int, bias: np.ndarray | None, activation: str | None = None
) -> np.ndarray:
    """The naive reference of ``panel_linear``: float64 product, bias and activation, (M, n) float32."""
    y = panel_matmul_reference(x, panels, n).astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    if activation == "relu":
        y = relu_naive(y)
    elif activation == "softmax":
        y = softmax_naive(y)
    return y.astype(np.float32)


_F32 = np.dtype(np.float32)


def _blas_threads() -> int:
    """``blas().num_threads`` without its two Python calls (0.2 µs instead of 0.4)."""
    get = blas()._get_threads
    return int(get()) if get is not None else 0


def _address(a: np.ndarray) -> int:
    """The data pointer of a C-contiguous array: 0.5 µs through the buffer protocol, against
    1.4 µs for ``a.ctypes.data`` (which read-only arrays still take)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]  # ndarray is a buffer
    except (TypeError, ValueError):
        return int(a.ctypes.data)


class PanelLinear(Linear):
    """A ``Linear`` whose product runs the panel kernel (one BLAS thread, ≥ 2 rows).

    ``weight`` stays the plain (in, out) array, so export and every ``isinstance(…, Linear)``
    path see an ordinary float layer; other calls (one row, a multi-threaded BLAS, no AVX2)
    go to ``np.matmul`` exactly as ``Linear`` does. ``fused_forward`` is the extra path the
    executor's Linear kernel takes first: product, bias and activation in ONE call of the
    compiled ``@layer`` (the layer's constants in a prebuilt descriptor, the output allocated
    here), or None to say "use matmul and the row kernels".
    """

    precision = "fp32"

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None):
        super().__init__(weight, bias)
        self.panels = pack_panels(self.weight)  # (ceil(out/16), in, 16)
        self._bias16 = pad_bias(self.bias, self.out_features)  # (ceil(out/16)·16,)
        n, k = self.out_features, self.in_features
        desc = dict(N=n, K=k, panels=self.panels.ctypes.data, biasp=self._bias16.ctypes.data, MC=ROWS_PER_CHUNK)
        self._desc = np.array([desc[f] for f in _DESC_FIELDS], np.int64)  # read by @layer
        self._desc_address = int(self._desc.ctypes.data)
        self._n, self._k, self._flops_per_row = n, k, 2 * n * k  # plain ints: read on every call

    @staticmethod
    def suits(weight: np.ndarray) -> bool:
        """A kernel to run the panels (any width: a partial last panel stores with a lane mask)."""
        return weight.ndim == 2 and gemm_kernel() is not None

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if x.ndim == 2 and x.shape[0] >= MIN_ROWS and blas().num_threads <= 1 and gemm_kernel() is not None:
            return panel_matmul(x, self.panels, self.out_features, out=out)
        return super().matmul(x, out=out)

    def fused_forward(self, x: np.ndarray, activation: str | None) -> np.ndarray | None:
        """``activation(x @ W + b)``, (M, out) float32, in one kernel call; None when this call is
        not the kernel's (multi-threaded BLAS, no kernel, not a C-contiguous float32 (M, in)
        input, softmax over more than 16 columns). ~2.5 µs of Python per call.

        One row runs here too, unlike ``matmul``: the 1-row tile is a little slower than BLAS's
        GEMV (19.5 against 16.6 µs for 784×256), but one call instead of GEMV + a row kernel per
        layer took the batch-1 pass from ~105 to ~74 µs (loaded machine, same run)."""
        act = ACTIVATION_CODES.get(activation)
        kernels = _compiled[0] if _compiled else _kernels()
        if (
            act is None
            or kernels is None
            or x.dtype != _F32
            or x.ndim != 2
            or x.shape[1] != self._k
            or not x.flags.c_contiguous
            or (act == ACT_SOFTMAX and self._n > NR)
            or _blas_threads() > 1
        ):
            return None
        m = x.shape[0]
        out = np.empty((m, self._n), np.float32)
        kernels.layer(self._desc_address, m, _address(x), _address(out), act)
        return out

    def flops(self, m: int) -> int:
        return m * self._flops_per_row

    def nbytes(self) -> int:
        return super().nbytes() + self.panels.nbytes
