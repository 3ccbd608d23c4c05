"""Find NumPy's OpenBLAS and control its threads per calling thread.

Big GEMMs (x @ W with thousands of rows) are best threaded by BLAS itself. Small ones (an
attention head's 128x32 @ 32x128) are not: a 2-thread BLAS call spends more time waking and
joining its helper than computing, and on a busy machine the helper may not even be scheduled.
So the engine splits attention over samples on its own threads and tells OpenBLAS to stay
single-threaded *inside those threads only* (``openblas_set_num_threads_local``, OpenBLAS >=
0.3.27). The trade-off: this reaches into NumPy's bundled library with ctypes; when the symbol
is absent (MKL/Accelerate NumPy, old OpenBLAS) every call here is a no-op and results are the
same, only the threading is left to the BLAS.
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache
from typing import Any

import numpy as np


class Blas:
    def __init__(self) -> None:
        self.lib = None
        self.library = "unknown"
        libs_dir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
        for path in sorted(glob.glob(os.path.join(libs_dir, "libscipy_openblas*"))):
            try:
                self.lib = ctypes.CDLL(path)
                self.library = os.path.basename(path)
                break
            except OSError:
                continue
        self._corename = self._symbol(
            "scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"
        )
        if self._corename is not None:
            self._corename.restype = ctypes.c_char_p
        self._get_threads = self._symbol(
            "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads"
        )
        self._set_local = self._symbol("openblas_set_num_threads_local")

    def _symbol(self, *names: str) -> Any:
        for name in names:
            fn = getattr(self.lib, name, None) if self.lib is not None else None
            if fn is not None:
                return fn
        return None

    @property
    def corename(self) -> str:
        """The OpenBLAS kernel family actually running (e.g. 'Haswell', 'Zen', 'SkylakeX')."""
        return self._corename().decode() if self._corename is not None else "unknown"

    @property
    def num_threads(self) -> int:
        return int(self._get_threads()) if self._get_threads is not None else 0

    def set_threads_local(self, n: int) -> int:
        """Limit BLAS threads for calls made by the *current* thread; returns the old value."""
        if self._set_local is None:
            return 0
        return int(self._set_local(int(n)))

    def describe(self) -> str:
        return f"{self.library} core={self.corename} threads={self.num_threads}"


@lru_cache(maxsize=1)
def blas() -> Blas:
    return Blas()
