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

Why LLVM IR and not numba: numba's auto-vectorizer only produced the dot-product form (a
horizontal sum per output, 2×4 tiles, ~80 GFLOP/s here, no faster than OpenBLAS); it never
vectorized the outer-product form, which needs explicit ``<8 x float>`` values. The kernel is
therefore ~60 lines of LLVM IR text generated below, compiled once per process by llvmlite
(numba's own LLVM, already a dependency) for the host CPU, and called through ctypes (which
releases the GIL). The trade-off: a ~0.1 s compile at first use, a second copy of the weight in
memory (the plain ``(in, out)`` one is kept for export and for the BLAS fallback), one thread
only (``PanelLinear`` hands multi-threaded BLAS configurations back to ``np.matmul``), and
results that differ from BLAS by float32 summation order (``k`` ascending, one FMA chain per
output; the tests bound it against ``panel_matmul_reference``).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import cast

import numpy as np

from openhood.engine.blas import blas
from openhood.engine.linear import Linear

NR = 16  # columns per panel: two 8-float AVX vectors
MR = 6  # rows per register tile: 12 accumulators
ROWS_PER_CHUNK = 96  # rows of x swept against every panel before moving on (96 × 784 × 4 B = 300 KB, in L2)
MIN_ROWS = 2  # a single row is a GEMV: memory-bound, BLAS's is as good

_GemmFn = Callable[[int, int, int, int, int, int, int, int, int], None]
_lock = threading.Lock()
_compiled: list[_GemmFn | None] = []  # [] = not tried yet; [None] = unavailable on this machine
_engines: list[object] = []


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


def _micro_kernel_ir(rows: int) -> str:
    """c[0:rows, 0:16] = a[0:rows, 0:K] @ b (K, 16): one phi'd <8 x float> accumulator per row and half."""
    lines = [
        f"define internal void @tile{rows}(i64 %K, ptr noalias %a, i64 %lda, ptr noalias %b, ptr noalias %c, i64 %ldc)"
        " alwaysinline {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %k = phi i64 [0, %entry], [%k1, %loop]",
    ]
    for r in range(rows):
        for h in range(2):
            lines.append(f"  %acc{r}_{h} = phi <8 x float> [zeroinitializer, %entry], [%n{r}_{h}, %loop]")
    lines += [
        f"  %boff = mul i64 %k, {NR}",
        "  %bp0 = getelementptr float, ptr %b, i64 %boff",
        "  %bp1 = getelementptr float, ptr %bp0, i64 8",
        "  %b0 = load <8 x float>, ptr %bp0, align 4",
        "  %b1 = load <8 x float>, ptr %bp1, align 4",
    ]
    for r in range(rows):
        lines += [
            f"  %ro{r} = mul i64 %lda, {r}",
            f"  %ai{r} = add i64 %ro{r}, %k",
            f"  %ap{r} = getelementptr float, ptr %a, i64 %ai{r}",
            f"  %as{r} = load float, ptr %ap{r}, align 4",
            f"  %av{r}i = insertelement <8 x float> poison, float %as{r}, i64 0",
            f"  %av{r} = shufflevector <8 x float> %av{r}i, <8 x float> poison, <8 x i32> zeroinitializer",
        ]
        for h in range(2):
            lines.append(
                f"  %n{r}_{h} = call <8 x float> @llvm.fma.v8f32(<8 x float> %av{r}, <8 x float> %b{h},"
                f" <8 x float> %acc{r}_{h})"
            )
    lines += ["  %k1 = add i64 %k, 1", "  %more = icmp ult i64 %k1, %K", "  br i1 %more, label %loop, label %exit"]
    lines.append("exit:")
    for r in range(rows):
        lines.append(f"  %co{r} = mul i64 %ldc, {r}")
        for h in range(2):
            lines += [
                f"  %cq{r}_{h} = add i64 %co{r}, {8 * h}",
                f"  %cp{r}_{h} = getelementptr float, ptr %c, i64 %cq{r}_{h}",
                f"  store <8 x float> %n{r}_{h}, ptr %cp{r}_{h}, align 4",
            ]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def _driver_ir() -> str:
    """@chunk: every panel × every 6-row block of up to ROWS_PER_CHUNK rows; @gemm: the chunks."""
    tails = " ".join(f"i64 {m}, label %t{m}" for m in range(1, MR))
    lines = [
        "define internal void @chunk(i64 %M, i64 %NP, i64 %K, ptr %a, i64 %lda, ptr %b, ptr %c, i64 %ldc) {",
        "entry:",
        f"  %full = udiv i64 %M, {MR}",
        f"  %mfull = mul i64 %full, {MR}",
        "  %rest = sub i64 %M, %mfull",
        f"  %pstride = mul i64 %K, {NR}",
        "  br label %ploop",
        "ploop:",
        "  %p = phi i64 [0, %entry], [%p1, %pnext]",
        "  %boff = mul i64 %p, %pstride",
        "  %bp = getelementptr float, ptr %b, i64 %boff",
        f"  %coff = mul i64 %p, {NR}",
        "  %cp = getelementptr float, ptr %c, i64 %coff",
        "  %none = icmp eq i64 %full, 0",
        "  br i1 %none, label %tail, label %iloop",
        "iloop:",
        "  %i = phi i64 [0, %ploop], [%i1, %iloop]",
        "  %ar = mul i64 %i, %lda",
        "  %ap = getelementptr float, ptr %a, i64 %ar",
        "  %cr = mul i64 %i, %ldc",
        "  %cpi = getelementptr float, ptr %cp, i64 %cr",
        f"  call void @tile{MR}(i64 %K, ptr %ap, i64 %lda, ptr %bp, ptr %cpi, i64 %ldc)",
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
        lines += [
            f"t{m}:",
            f"  call void @tile{m}(i64 %K, ptr %tap, i64 %lda, ptr %bp, ptr %tcp, i64 %ldc)",
            "  br label %pnext",
        ]
    lines += [
        "pnext:",
        "  %p1 = add i64 %p, 1",
        "  %pm = icmp ult i64 %p1, %NP",
        "  br i1 %pm, label %ploop, label %done",
        "done:",
        "  ret void",
        "}",
        "",
        "define void @gemm(i64 %M, i64 %NP, i64 %K, ptr %a, i64 %lda, ptr %b, ptr %c, i64 %ldc, i64 %MC) {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %r = phi i64 [0, %entry], [%r1, %loop]",
        "  %left = sub i64 %M, %r",
        "  %small = icmp ult i64 %left, %MC",
        "  %m = select i1 %small, i64 %left, i64 %MC",
        "  %ao = mul i64 %r, %lda",
        "  %ap = getelementptr float, ptr %a, i64 %ao",
        "  %co = mul i64 %r, %ldc",
        "  %cp = getelementptr float, ptr %c, i64 %co",
        "  call void @chunk(i64 %m, i64 %NP, i64 %K, ptr %ap, i64 %lda, ptr %b, ptr %cp, i64 %ldc)",
        "  %r1 = add i64 %r, %MC",
        "  %more = icmp ult i64 %r1, %M",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def module_ir() -> str:
    """The whole LLVM module: the FMA intrinsic, tiles of 1..6 rows, the drivers."""
    parts = ["declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)"]
    parts += [_micro_kernel_ir(rows) for rows in range(1, MR + 1)]
    parts.append(_driver_ir())
    return "\n\n".join(parts)


def _compile() -> _GemmFn | None:
    import llvmlite.binding as llvm  # type: ignore[import-untyped]

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    if "+fma" not in features or "+avx2" not in features:
        return None  # the IR would still compile (LLVM splits the vectors), but not faster than BLAS
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3)
    mod = llvm.parse_assembly(module_ir())
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, i64, i64, i64, ptr, i64, ptr, ptr, i64, i64)(engine.get_function_address("gemm"))
    _engines.append(engine)  # the compiled code lives as long as the engine object: keep it for the process
    return cast(_GemmFn, fn)


def gemm_kernel() -> _GemmFn | None:
    """The compiled kernel, or None where it cannot run (no AVX2/FMA, llvmlite failure)."""
    with _lock:
        if not _compiled:
            try:
                _compiled.append(_compile())
            except Exception:  # a missing target or a JIT failure: BLAS serves instead
                _compiled.append(None)
        return _compiled[0]


def panel_matmul(x: np.ndarray, panels: np.ndarray, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """``x (M, K) @ W`` for ``panels = pack_panels(W)`` and W's ``n`` columns; (M, n) float32.

    When ``n`` is not a multiple of 16 (a 10-class head) the kernel writes the padded (M, 16·P)
    product into a scratch array and the first ``n`` columns are copied out: M × n floats.
    """
    fn = gemm_kernel()
    n_panels, k, _ = panels.shape
    width = n_panels * NR
    if fn is None:
        raise RuntimeError("panel_matmul needs the compiled kernel (see gemm_kernel)")
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
    if m:
        dest = out if n == width else np.empty((m, width), np.float32)  # (M, 16·P)
        fn(m, n_panels, k, x.ctypes.data, k, panels.ctypes.data, dest.ctypes.data, width, ROWS_PER_CHUNK)
        if dest is not out:
            out[...] = dest[:, :n]
    return out


class PanelLinear(Linear):
    """A ``Linear`` whose product runs the panel kernel (one BLAS thread, ≥ 2 rows).

    ``weight`` stays the plain (in, out) array, so export and every ``isinstance(…, Linear)``
    path see an ordinary float layer; other calls (one row, a multi-threaded BLAS, no AVX2)
    go to ``np.matmul`` exactly as ``Linear`` does.
    """

    precision = "fp32"

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None):
        super().__init__(weight, bias)
        self.panels = pack_panels(self.weight)  # (out/16, in, 16)

    @staticmethod
    def suits(weight: np.ndarray) -> bool:
        """Whole panels and a kernel to run them. A 10-class head stays BLAS: its padded panel
        measured 15 µs against np.matmul's 8 µs at (64, 256) @ (256, 10)."""
        return weight.shape[1] % NR == 0 and gemm_kernel() is not None

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if x.ndim == 2 and x.shape[0] >= MIN_ROWS and blas().num_threads <= 1 and gemm_kernel() is not None:
            return panel_matmul(x, self.panels, self.out_features, out=out)
        return super().matmul(x, out=out)

    def nbytes(self) -> int:
        return super().nbytes() + self.panels.nbytes
