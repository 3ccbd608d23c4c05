"""Compile a hand-written LLVM IR module for this CPU and hand back its functions' addresses.

The engine's SIMD kernels (``panel_gemm``, ``depthwise_simd``) are LLVM IR text generated in
Python, compiled here once per process by llvmlite (numba's own LLVM, already a dependency) with
the host's CPU name and features at -O3, and called through ctypes, which releases the GIL. The
trade-off: a compile of ~0.1 s at first use and machine code that lives until the process ends
(the execution engines are kept here: freeing one would free its code under a live function
pointer); in exchange, no C toolchain at install time. Kernels need AVX2 and FMA: below the
``avx2`` level of ``engine.kernels.isa`` (a CPU without them, or ``OPENHOOD_ISA=generic``)
``jit_module`` returns None and each caller keeps its BLAS or numba path. The target's CPU name
and feature string come from ``isa`` (one place decides what code the kernels may use).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from openhood.engine.kernels import isa

_engines: list[object] = []  # every execution engine made, kept for the life of the process
_lock = threading.Lock()


def host_has_simd() -> bool:
    """Whether the chosen ISA level includes what the kernels are written for (AVX2 vectors, FMA)."""
    return isa.level() >= isa.Level.AVX2


def jit_module(ir: str) -> Callable[[str], int] | None:
    """Verify, optimise (-O3) and compile ``ir`` for the host; a function name → its address
    (wrap it in a ``ctypes.CFUNCTYPE``), or None below the ``avx2`` level (the IR would still
    compile, LLVM splitting the vectors, but no faster than the fallbacks)."""
    import llvmlite.binding as llvm  # type: ignore[import-untyped]

    with _lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        features = isa.llvm_features()
        if features is None:
            return None
        tm = llvm.Target.from_default_triple().create_target_machine(cpu=isa.host().llvm_cpu, features=features, opt=3)
        mod = llvm.parse_assembly(ir)
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
        pb.getModulePassManager().run(mod, pb)
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        _engines.append(engine)
    address: Callable[[str], int] = engine.get_function_address
    return address
