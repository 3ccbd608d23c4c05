"""Run a prepared list of native kernel calls in one ctypes call (one GIL release per list).

A batch-1 inverted-residual block is a handful of short kernel calls (expand 1×1, depthwise,
project 1×1: 50-300 µs each); made one by one from Python, every return takes the GIL back,
and with two threads working a thread coming back from a kernel finds it held and sleeps
(traced: kernel calls incl. the GIL retake summed to 16 ms over two threads against 11 ms on
one, the kernels themselves 144 → 156 µs). Here the calls are records in an (n, RECORD)
int64 array, arguments converted once when the list is built (pointers as integers, floats
as their bits), and ``@run`` (LLVM IR, compiled by ``engine.kernels.llvm_jit``) walks the array and
calls each kernel through its function pointer: a list per thread per block, one ctypes call.

Record layout: ``[kind, function address, a0 … a16]``; ``kind`` selects the signature
(``SIGNATURES``: @pw of ``pointwise_simd``, @dw of ``depthwise_simd``, or ``ADD``, the
``@add_rows`` of this module: dst[i, :cols] = src + r1 + r2 over strided rows, for an
epilogue that no kernel's store does: a width that is not a multiple of 16, a partial sum).

Trade-off: a list holds raw addresses, so its builder must keep every array it points into
alive and rebuild it whenever one moves (``engine.graph.mbconv_plan`` keys its lists by the
activations' addresses); nothing checks them at run time. None where the host has no
AVX2+FMA (the kernels it would call do not exist there either).
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable, Sequence

import numpy as np

from openhood.engine.kernels.llvm_jit import jit_module

# Argument types of each record kind, in call order (LLVM IR spelling); the Python encoder, the
# IR decoder and the ctypes prototypes of pointwise_simd.kernel() and depthwise_simd.kernel(k)
# (``prototype``) all read them.
PW, DW, ADD = 0, 1, 2
SIGNATURES: dict[int, tuple[str, ...]] = {
    PW: tuple("i64 i64 i64 ptr i64 ptr i64 ptr i64 ptr ptr i64 float float i64 i64 ptr".split()),
    DW: tuple("i64 i64 i64 i64 ptr i64 i64 i64 i64 ptr i64 ptr ptr i64 i64 float float".split()),
    # rows, cols, src, lds, dst, ldd, r1, ld1, r2, ld2 (strides in floats)
    ADD: tuple("i64 i64 ptr i64 ptr i64 ptr i64 ptr i64".split()),
}
RECORD = 2 + max(len(s) for s in SIGNATURES.values())  # int64 slots per record

Operand = np.ndarray | tuple[int, int]  # an array, or (address, row stride in floats)
_lock = threading.Lock()
_functions: dict[object, Callable[..., None] | None] = {}  # jit_function's, by key; None = unavailable
_RUN: Callable[[int], Callable[..., None]] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)  # @run's type


def _add_rows_ir() -> str:
    """@add_rows: dst[i·ldd + j] = src[i·lds + j] + r1[i·ld1 + j] + r2[i·ld2 + j] (an absent
    operand is a zero row with stride 0). No noalias: dst may be src or r1 (in place)."""
    return "\n".join(
        [
            "define internal void @add_rows(i64 %rows, i64 %cols, ptr %src, i64 %lds, ptr %dst, i64 %ldd,"
            " ptr %r1, i64 %ld1, ptr %r2, i64 %ld2) {",
            "entry:",
            "  %none = icmp eq i64 %rows, 0",
            "  %nocol = icmp eq i64 %cols, 0",
            "  %skip = or i1 %none, %nocol",
            "  br i1 %skip, label %done, label %row",
            "row:",
            "  %i = phi i64 [0, %entry], [%i1, %rowend]",
            "  %so = mul i64 %i, %lds",
            "  %sp = getelementptr float, ptr %src, i64 %so",
            "  %do = mul i64 %i, %ldd",
            "  %dp = getelementptr float, ptr %dst, i64 %do",
            "  %o1 = mul i64 %i, %ld1",
            "  %p1 = getelementptr float, ptr %r1, i64 %o1",
            "  %o2 = mul i64 %i, %ld2",
            "  %p2 = getelementptr float, ptr %r2, i64 %o2",
            "  br label %col",
            "col:",
            "  %j = phi i64 [0, %row], [%j1, %col]",
            "  %sj = getelementptr float, ptr %sp, i64 %j",
            "  %a = load float, ptr %sj, align 4",
            "  %bj = getelementptr float, ptr %p1, i64 %j",
            "  %b = load float, ptr %bj, align 4",
            "  %cj = getelementptr float, ptr %p2, i64 %j",
            "  %c = load float, ptr %cj, align 4",
            "  %ab = fadd float %a, %b",
            "  %abc = fadd float %ab, %c",
            "  %dj = getelementptr float, ptr %dp, i64 %j",
            "  store float %abc, ptr %dj, align 4",
            "  %j1 = add i64 %j, 1",
            "  %jm = icmp ult i64 %j1, %cols",
            "  br i1 %jm, label %col, label %rowend",
            "rowend:",
            "  %i1 = add i64 %i, 1",
            "  %im = icmp ult i64 %i1, %rows",
            "  br i1 %im, label %row, label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


def _call_ir(kind: int) -> list[str]:
    """Block ``k{kind}``: decode the record at %rp with SIGNATURES[kind] and make the call."""
    types = SIGNATURES[kind]
    lines = [f"k{kind}:"]
    args = []
    for j, t in enumerate(types):
        v = f"%k{kind}a{j}"
        lines += [f"  {v}p = getelementptr i64, ptr %rp, i64 {2 + j}", f"  {v}i = load i64, ptr {v}p, align 8"]
        if t == "ptr":
            lines.append(f"  {v} = inttoptr i64 {v}i to ptr")
        elif t == "float":
            lines += [f"  {v}t = trunc i64 {v}i to i32", f"  {v} = bitcast i32 {v}t to float"]
        else:
            lines.append(f"  {v} = add i64 {v}i, 0")
        args.append(f"{t} {v}")
    if kind == ADD:
        lines.append(f"  call void @add_rows({', '.join(args)})")
    else:
        lines += [
            f"  %k{kind}fp = getelementptr i64, ptr %rp, i64 1",
            f"  %k{kind}fi = load i64, ptr %k{kind}fp, align 8",
            f"  %k{kind}f = inttoptr i64 %k{kind}fi to ptr",
            f"  call void %k{kind}f({', '.join(args)})",
        ]
    lines.append("  br label %next")
    return lines


def module_ir() -> str:
    """@add_rows and @run(ptr records, i64 count)."""
    cases = " ".join(f"i64 {k}, label %k{k}" for k in SIGNATURES)
    lines = [
        "define void @run(ptr %recs, i64 %n) {",
        "entry:",
        "  %empty = icmp eq i64 %n, 0",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %next]",
        f"  %base = mul i64 %i, {RECORD}",
        "  %rp = getelementptr i64, ptr %recs, i64 %base",
        "  %kind = load i64, ptr %rp, align 8",
        f"  switch i64 %kind, label %next [{cases}]",
    ]
    for k in SIGNATURES:
        lines += _call_ir(k)
    lines += [
        "next:",
        "  %i1 = add i64 %i, 1",
        "  %more = icmp ult i64 %i1, %n",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    return _add_rows_ir() + "\n\n" + "\n".join(lines)


def runner() -> Callable[[int, int], None] | None:
    """The compiled @run(records address, count), or None where it cannot run."""
    return jit_function("run", "run", _RUN, module_ir)


def jit_function(
    key: object, name: str, proto: Callable[[int], Callable[..., None]], ir: Callable[..., str], *ir_args: object
) -> Callable[..., None] | None:
    """Function ``name`` of the LLVM module ``ir(*ir_args)`` as a ``proto`` (a ctypes function type),
    compiled once per process and ``key``; None where it cannot run (no AVX2/FMA, a missing
    target, a JIT failure: the caller keeps its fallback path)."""
    if key in _functions:  # compiled (or found unavailable) before: no lock (entries stay)
        return _functions[key]
    with _lock:
        if key not in _functions:
            try:
                address = jit_module(ir(*ir_args))
                _functions[key] = None if address is None else proto(address(name))
            except Exception:  # a missing target or a JIT failure
                _functions[key] = None
        return _functions[key]


_CTYPES = {"i64": ctypes.c_int64, "ptr": ctypes.c_void_p, "float": ctypes.c_float}


def prototype(kind: int) -> Callable[[int], Callable[..., None]]:
    """The ctypes function type of a kernel with SIGNATURES[kind] (returning void)."""
    proto: Callable[[int], Callable[..., None]] = ctypes.CFUNCTYPE(None, *(_CTYPES[t] for t in SIGNATURES[kind]))
    return proto


def address(fn: object) -> int:
    """A ctypes function object's entry address (what a record's second slot holds)."""
    value = ctypes.cast(fn, ctypes.c_void_p).value  # type: ignore[arg-type]
    if not value:
        raise ValueError("not a native function")
    return int(value)


def _encode(t: str, value: object) -> int:
    if t == "float":
        return int(struct.unpack("<I", struct.pack("<f", float(value)))[0])  # type: ignore[arg-type]
    if value is None:
        return 0
    return int(value)  # type: ignore[call-overload,no-any-return]


class CallList:
    """Records appended with ``add``; ``freeze()`` → (address, count) for ``runner()``; ``keep``
    holds the arrays the records point into (their owner must outlive the list)."""

    def __init__(self) -> None:
        self._rows: list[list[int]] = []
        self.keep: list[np.ndarray] = []
        self.records = np.zeros((0, RECORD), np.int64)

    def add(self, kind: int, fn: object, args: Sequence[object]) -> None:
        types = SIGNATURES[kind]
        if len(args) != len(types):
            raise ValueError(f"record kind {kind} takes {len(types)} arguments, got {len(args)}")
        row = [kind, 0 if kind == ADD else address(fn)] + [_encode(t, a) for t, a in zip(types, args, strict=True)]
        self._rows.append(row + [0] * (RECORD - len(row)))

    def add_rows(
        self,
        rows: int,
        cols: int,
        dst: Operand,
        src: Operand | None,
        r1: Operand | None = None,
        r2: Operand | None = None,
    ) -> None:
        """dst[:rows, :cols] ← src + r1 + r2: each a 2-D float32 array with unit column step (rows
        strided, at least ``cols`` wide) or an (address, row stride in floats) pair; None: absent."""
        zero = np.zeros(cols, np.float32)
        self.keep.append(zero)

        def op(a: Operand | None) -> tuple[int, int]:
            if a is None:
                return zero.ctypes.data, 0
            if isinstance(a, tuple):
                return a
            if a.dtype != np.float32 or a.ndim != 2 or a.shape[0] < rows or a.shape[1] < cols or a.strides[1] != 4:
                raise ValueError(f"operand {a.dtype} {a.shape} does not cover ({rows}, {cols}) with unit columns")
            return a.ctypes.data, a.strides[0] // 4

        self.add(ADD, None, (rows, cols, *op(src), *op(dst), *op(r1), *op(r2)))

    def freeze(self) -> tuple[int, int]:
        self.records = np.array(self._rows, np.int64).reshape(-1, RECORD)
        return self.records.ctypes.data, len(self._rows)
