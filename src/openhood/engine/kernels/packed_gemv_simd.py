"""The batch-1 product of a packed Q4_1 or Q8_0 matrix and one float32 row, in hand-written vector IR.

numba vectorizes ``packed_matmul``'s gemv only over the innermost loop (the chunk's 64 rows),
so every one of a block's 16 byte columns reloads and re-stores the block's accumulators and
runs the loop's alias checks and set-up (seen in its assembly). Here
the loops are written out in LLVM IR with the accumulators as ``<8 x float>`` values in
registers: per 8 rows and byte column, one widening load of 8 bytes, a mask and a shift for the
two nibbles, two conversions and two FMAs (16 weights), the float16 scales and minima widened
by ``fpext`` (one instruction with F16C); a Q8_0 column is one sign-extending load, one
conversion and one FMA. Half a chunk (32 rows: 4 block and 4 chunk
accumulators) is swept at a time, so the live vectors fit AVX2's 16 registers.

The arithmetic is ``packed_matmul``'s: ``y = Σ_b d_b Σ_j nib_j x_j + m_b Σ_j x_j`` in float32
(the activations stay float32; only the summation order differs from the reference). Measured
(ad-hoc A/B, 2 threads, AMD EPYC at avx2): SmolLM2's gate/up matrix (3072, 576) 47 µs against
155 µs for numba's gemv; ``benchmarks/decoder.py --every-isa``: 151.6 tokens/s at avx2 against
65.7 with numba's gemv (generic), 128 tokens after a 99-token prompt. The
function takes a range of chunks and is called from numba's ``prange`` (one range per thread)
through external symbols (``SYMBOLS``) that ``register`` binds to the compiled code's address:
numba's compiled and cached callers link to it by name, so their on-disk cache stays valid
across processes. The trade-off: IR text is harder to read than numba, and the kernel exists
only from the ``avx2`` level of ``engine.kernels.isa`` on (``register`` says which); below it the callers
keep the numba kernel, which the tests hold this one equal to.
"""

from __future__ import annotations

import ctypes
import threading

from openhood.engine.kernels import llvm_jit
from openhood.engine.kernels.packed_layout import CH

# void (i64 q, i64 d, i64 m, i64 x, i64 xsum, i64 nb, i64 c0, i64 c1, i64 out), one per block kind
SYMBOLS = {"Q4_1": "openhood_q4_1_gemv", "Q8_0": "openhood_q8_0_gemv"}
HALF_ROWS = 32  # rows swept at a time: 4 vectors of 8
GROUPS = HALF_ROWS // 8
BYTES = {"Q4_1": 16, "Q8_0": 32}  # byte columns per 32-weight block: two nibbles each, or one int8

_lock = threading.Lock()
_state: dict[str, bool] = {}


def kernel_ir() -> str:
    """The module: one exported function per block kind (``SYMBOLS``)."""
    fma = "declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)\n"
    return fma + "".join(_gemv_ir(kind) for kind in SYMBOLS)


def _splat(dst: str, scalar: str) -> list[str]:
    """IR lines: ``dst`` = the float ``scalar`` in all 8 lanes."""
    return [
        f"  {dst}.1 = insertelement <8 x float> poison, float {scalar}, i64 0",
        f"  {dst} = shufflevector <8 x float> {dst}.1, <8 x float> poison, <8 x i32> zeroinitializer",
    ]


def _gemv_ir(kind: str) -> str:
    """One function over chunks [c0, c1) of a packed ``kind`` matrix.

    q (nc, nb, 16, CH) uint8 (Q4_1) or (nc, nb, 32, CH) int8 (Q8_0), d and m (nc, nb, CH) float16
    bits (m and xsum unread for Q8_0), x (nb * 32,) float32, xsum (nb,) each block's Σ x, out
    (c1 * CH,) float32: chunk c's rows at out[c * CH:]."""
    v, vi = "<8 x float>", "<8 x i32>"
    zero = "zeroinitializer"
    q4 = kind == "Q4_1"
    L = [
        f"define void @{SYMBOLS[kind]}(i64 %qa, i64 %da, i64 %ma, i64 %xa, i64 %sa, i64 %nb, i64 %c0, i64 %c1, i64 %oa) {{",
        "entry:",
        "  %q = inttoptr i64 %qa to ptr",
        "  %d = inttoptr i64 %da to ptr",
        "  %m = inttoptr i64 %ma to ptr",
        "  %x = inttoptr i64 %xa to ptr",
        "  %xs = inttoptr i64 %sa to ptr",
        "  %o = inttoptr i64 %oa to ptr",
        "  %none = icmp sge i64 %c0, %c1",
        "  br i1 %none, label %done, label %chunk",
        # ---- for c in [c0, c1), h in {0, 1}: rows c*CH + h*32 ... +32
        "chunk:",
        "  %c = phi i64 [%c0, %entry], [%cn, %chunk_end]",
        "  br label %half",
        "half:",
        "  %h = phi i64 [0, %chunk], [%hn, %half_end]",
        f"  %r0 = mul i64 %h, {HALF_ROWS}",
        "  %cnb = mul i64 %c, %nb",
        "  br label %block",
        # ---- for b in [0, nb)
        "block:",
        "  %b = phi i64 [0, %half], [%bn, %block_end]",
        *[f"  %acc{g} = phi {v} [{zero}, %half], [%accn{g}, %block_end]" for g in range(GROUPS)],
        "  %cb = add i64 %cnb, %b",
        "  %xb = mul i64 %b, 32",
        "  br label %col",
        # ---- for j in [0, 16): byte column j holds weights j (low nibble) and j + 16 (high)
        "col:",
        "  %j = phi i64 [0, %block], [%jn, %col]",
        *[f"  %blk{g} = phi {v} [{zero}, %block], [%blkn{g}, %col]" for g in range(GROUPS)],
        "  %xi = add i64 %xb, %j",
        "  %xlp = getelementptr float, ptr %x, i64 %xi",
        "  %xl = load float, ptr %xlp, align 4",
        *_splat("%xlv", "%xl"),
    ]
    if q4:  # the high nibble of column j is weight j + 16
        L += [
            "  %xhp = getelementptr float, ptr %xlp, i64 16",
            "  %xh = load float, ptr %xhp, align 4",
            *_splat("%xhv", "%xh"),
        ]
    L += [
        f"  %qrow0 = mul i64 %cb, {BYTES[kind]}",
        "  %qrow = add i64 %qrow0, %j",
        f"  %qoff0 = mul i64 %qrow, {CH}",
        "  %qoff = add i64 %qoff0, %r0",
    ]
    for g in range(GROUPS):
        L += [
            f"  %qp{g} = getelementptr i8, ptr %q, i64 %qoff",
            f"  %qg{g} = getelementptr i8, ptr %qp{g}, i64 {8 * g}",
            f"  %by{g} = load <8 x i8>, ptr %qg{g}, align 1",
        ]
        if q4:
            L += [
                f"  %bw{g} = zext <8 x i8> %by{g} to {vi}",
                f"  %lo{g} = and {vi} %bw{g}, <i32 15, i32 15, i32 15, i32 15, i32 15, i32 15, i32 15, i32 15>",
                f"  %hi{g} = lshr {vi} %bw{g}, <i32 4, i32 4, i32 4, i32 4, i32 4, i32 4, i32 4, i32 4>",
                f"  %lof{g} = sitofp {vi} %lo{g} to {v}",
                f"  %hif{g} = sitofp {vi} %hi{g} to {v}",
                f"  %blkl{g} = call {v} @llvm.fma.v8f32({v} %lof{g}, {v} %xlv, {v} %blk{g})",
                f"  %blkn{g} = call {v} @llvm.fma.v8f32({v} %hif{g}, {v} %xhv, {v} %blkl{g})",
            ]
        else:
            L += [
                f"  %bw{g} = sext <8 x i8> %by{g} to {vi}",
                f"  %bf{g} = sitofp {vi} %bw{g} to {v}",
                f"  %blkn{g} = call {v} @llvm.fma.v8f32({v} %bf{g}, {v} %xlv, {v} %blk{g})",
            ]
    L += [
        "  %jn = add i64 %j, 1",
        f"  %jdone = icmp eq i64 %jn, {BYTES[kind]}",
        "  br i1 %jdone, label %block_end, label %col",
        # ---- acc += d * blk + m * Σx over the block
        "block_end:",
        f"  %foff0 = mul i64 %cb, {CH}",
        "  %foff = add i64 %foff0, %r0",
    ]
    if q4:
        L += [
            "  %sp = getelementptr float, ptr %xs, i64 %b",
            "  %sb = load float, ptr %sp, align 4",
            *_splat("%sbv", "%sb"),
        ]
    for g in range(GROUPS):
        L += [
            f"  %fo{g} = add i64 %foff, {8 * g}",
            f"  %dp{g} = getelementptr half, ptr %d, i64 %fo{g}",
            f"  %dh{g} = load <8 x half>, ptr %dp{g}, align 2",
            f"  %dv{g} = fpext <8 x half> %dh{g} to {v}",
        ]
        if q4:
            L += [
                f"  %mp{g} = getelementptr half, ptr %m, i64 %fo{g}",
                f"  %mh{g} = load <8 x half>, ptr %mp{g}, align 2",
                f"  %mv{g} = fpext <8 x half> %mh{g} to {v}",
                f"  %acd{g} = call {v} @llvm.fma.v8f32({v} %dv{g}, {v} %blkn{g}, {v} %acc{g})",
                f"  %accn{g} = call {v} @llvm.fma.v8f32({v} %mv{g}, {v} %sbv, {v} %acd{g})",
            ]
        else:
            L += [f"  %accn{g} = call {v} @llvm.fma.v8f32({v} %dv{g}, {v} %blkn{g}, {v} %acc{g})"]
    L += [
        "  %bn = add i64 %b, 1",
        "  %bdone = icmp eq i64 %bn, %nb",
        "  br i1 %bdone, label %half_end, label %block",
        # ---- store the half chunk's 32 sums
        "half_end:",
        f"  %ooff0 = mul i64 %c, {CH}",
        "  %ooff = add i64 %ooff0, %r0",
    ]
    for g in range(GROUPS):
        L += [
            f"  %oo{g} = add i64 %ooff, {8 * g}",
            f"  %op{g} = getelementptr float, ptr %o, i64 %oo{g}",
            f"  store {v} %accn{g}, ptr %op{g}, align 4",
        ]
    L += [
        "  %hn = add i64 %h, 1",
        f"  %hdone = icmp eq i64 %hn, {CH // HALF_ROWS}",
        "  br i1 %hdone, label %chunk_end, label %half",
        "chunk_end:",
        "  %cn = add i64 %c, 1",
        "  %cdone = icmp eq i64 %cn, %c1",
        "  br i1 %cdone, label %done, label %chunk",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(L) + "\n"


def _refuse(*_args: int) -> None:  # pragma: no cover - callers never take the SIMD branch below avx2
    raise RuntimeError("a packed SIMD gemv was called below the avx2 level")


_unavailable = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 9))(_refuse)  # kept alive: its address is bound


def register() -> bool:
    """Compile the kernels (once per process) and bind ``SYMBOLS`` to them for numba's linker;
    False below the ``avx2`` level: nothing is compiled, the symbols are bound to a function that
    is never called (a numba caller holds both branches and needs the names to link) and the
    callers take the numba kernels. Called before every product: after the first call, a dict
    lookup without the lock."""
    if "done" in _state:  # entries are only ever added
        return _state["done"]
    with _lock:
        if "done" not in _state:
            import llvmlite.binding as llvm  # type: ignore[import-untyped]

            address = llvm_jit.jit_module(kernel_ir())
            for symbol in SYMBOLS.values():
                target = address(symbol) if address is not None else ctypes.cast(_unavailable, ctypes.c_void_p).value
                llvm.add_symbol(symbol, target)
            _state["done"] = address is not None
        return _state["done"]
