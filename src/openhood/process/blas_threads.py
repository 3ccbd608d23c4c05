"""OpenBLAS's idle worker threads sleep at once instead of polling: a decode loop's cores stay free.

OpenBLAS (the pthreads build numpy wheels ship) keeps its worker threads polling for the next job,
yielding between polls, for 2^28 cycles (~0.1 s) after every call before they sleep. A prompt's
prefill runs its products through sgemm; the quantized decode steps that follow run on numba's
OpenMP threads, and for that tenth of a second the pollers share the same cores with them:
decoding 32 tokens right after a 99-token prompt took 9.5 ms per token against 6.4 with the
pollers asleep (ad-hoc A/B on 2 cores, 6 Dec; ``benchmarks/decoder.py``'s workers call this as
``openhood generate`` does). ``OPENBLAS_THREAD_TIMEOUT`` (2^N cycles, N in 4..30) is read once,
when the library loads, so this must run before NumPy's first import; a process whose NumPy is
already loaded keeps what it has. A value you set yourself is left alone.

The trade-off: every sgemm then wakes its workers (a futex wake, microseconds) instead of finding
them polling: a few milliseconds over a prompt's ~120 products, against ~0.1 s saved in the decode
steps after it. Only for a command that decodes (``openhood generate``): a server's embedding
engine makes BLAS calls back to back, where polling workers are the point.
"""

from __future__ import annotations

import os
import sys

ENV = "OPENBLAS_THREAD_TIMEOUT"
SLEEP_AT_ONCE = "4"  # the smallest timeout OpenBLAS accepts: 2^4 cycles


def sleep_idle_blas_threads() -> bool:
    """Ask OpenBLAS's workers to sleep as soon as they are idle; False where it is too late (NumPy
    already imported) or the variable is already set (then it is yours)."""
    if "numpy" in sys.modules or ENV in os.environ:
        return False
    os.environ[ENV] = SLEEP_AT_ONCE
    return True
