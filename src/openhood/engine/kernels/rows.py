"""The engine's compiled row kernels (bias + GELU/ReLU, bias add, LayerNorm, softmax) as ``ops`` calls them.

Their source is numba code in ``engine/kernels/numba_rows.py`` (the numerics are explained there).
They run from a library compiled ahead of time for this CPU (``openhood.aot``: built once per
machine and kernel source, loaded in about a millisecond without importing numba), or through
numba's JIT with the same options where that library cannot be built.

The trade-off: one explicit signature per kernel, written once here: float32, C-contiguous rows
written in place, read-only inputs accepted. Another dtype or layout is a ``TypeError`` at the
call, never a silent recompilation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openhood.aot import Export, KernelSet

# numba options of every row and CNN kernel. fastmath: FMA contraction and reassociation
# (vectorized reductions) only: no approximate functions and no nnan/ninf, so NaN and infinity
# still propagate (numba_rows's docstring).
OPTIONS: dict[str, Any] = {"nogil": True, "fastmath": {"contract", "reassoc", "nsz"}, "error_model": "numpy"}

_SOURCE = "openhood.engine.kernels.numba_rows"
_ROWS, _VEC = "f4[:, ::1]", "f4[::1]"  # (N, F) written in place; (F,) read

ROWS = KernelSet(
    "rows",
    (
        Export("gelu_rows", f"{_SOURCE}:_gelu_rows", (_ROWS, _VEC), readonly=(1,), options=OPTIONS),
        Export("relu_rows", f"{_SOURCE}:_relu_rows", (_ROWS, _VEC), readonly=(1,), options=OPTIONS),
        Export("add_rows", f"{_SOURCE}:_add_rows", (_ROWS, _VEC), readonly=(1,), options=OPTIONS),
        # (y, bias, residual (N, C) or (0, C), gamma, beta, eps)
        Export(
            "layernorm_rows",
            f"{_SOURCE}:_layernorm_rows",
            (_ROWS, _VEC, _ROWS, _VEC, _VEC, "f4"),
            readonly=(1, 2, 3, 4),
            options=OPTIONS,
        ),
        # (y, bias rows, rows per bias row, scale, (T,) int32 scratch)
        Export(
            "softmax_rows",
            f"{_SOURCE}:_softmax_rows",
            (_ROWS, _ROWS, "i8", "f4", "i4[::1]"),
            readonly=(1,),
            options=OPTIONS,
        ),
    ),
    sources=(Path(__file__).with_name("numba_rows.py"), Path(__file__)),
)

gelu_rows = ROWS.kernel("gelu_rows")
relu_rows = ROWS.kernel("relu_rows")
add_rows = ROWS.kernel("add_rows")
layernorm_rows = ROWS.kernel("layernorm_rows")
softmax_rows = ROWS.kernel("softmax_rows")
