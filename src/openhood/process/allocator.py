"""glibc malloc policy for a long-running inference process: large arrays go back to the OS.

glibc hands an allocation of at least ``M_MMAP_THRESHOLD`` bytes its own ``mmap`` and unmaps it
on free. But the threshold is dynamic by default: the first time such a chunk is freed, glibc
raises the threshold to that chunk's size (up to 32 MiB on 64-bit). From then on the engine's
large temporaries — a (tokens, 1536) float32 activation is 6 MiB at 1024 tokens, a prefill's
logits more — are carved out of the heap arenas instead, and what is freed there stays in the
process as fragments between live chunks. With shapes that vary per request (every batch of an
inference server), RSS then creeps up for a long time before it settles: the "memory that only
grows" of a soak test, without any Python object leaking (tracemalloc stays flat).

``apply_malloc_policy`` can set the threshold explicitly (``mallopt``), which switches the
dynamic adjustment off: every array of ``MMAP_THRESHOLD`` bytes or more is mapped on allocation
and returned on free, so a large temporary never fragments the heap. Pinning also stops glibc
raising its *trim* threshold alongside (it stays at 128 KiB), so free space at the top of the
heap goes back to the OS as well. The trade-off, measured (docs/soak.md § Bounded buffers):
memory given back must be faulted in (zeroed) again on the next allocation, where a recycled
heap chunk is free — the embedding engine ran at 0.87–0.96× its throughput (two runs) for
70–80 MB less RSS, and pinning at 32 MiB cost the same, so the cost is the trimming rather than
the threshold's value. So the policy is per command: ``pinned`` for ``openhood generate`` (the
decoder's memory budget is tight), ``default`` (glibc's own behaviour) for ``serve`` and
``batch``, whose 30-minute soaks stay flat without it.
``OPENHOOD_MALLOC_POLICY=pinned|default`` overrides the command's choice; a
``MALLOC_MMAP_THRESHOLD_`` of your own (glibc reads it at start-up) is left alone. Not glibc
(musl, macOS): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
# Above the engine's per-row temporaries, below its batch activations. 128 KiB (glibc's initial
# value) measured 0.85x throughput, 4 MiB 0.87-0.96x, 32 MiB 0.89x: the trimming costs, not this.
MMAP_THRESHOLD = 4 << 20
POLICY_ENV = "OPENHOOD_MALLOC_POLICY"
POLICIES = ("pinned", "default")
GLIBC_ENV = "MALLOC_MMAP_THRESHOLD_"


def apply_malloc_policy(default: str, threshold: int = MMAP_THRESHOLD) -> str:
    """Apply the command's ``default`` policy (or ``OPENHOOD_MALLOC_POLICY``); returns what was
    done, for the start-up log: ``"pinned"``, ``"default"``, or why not (``"env"``: your own
    ``MALLOC_MMAP_THRESHOLD_``; ``"not glibc"``; ``"failed"``)."""
    policy = os.environ.get(POLICY_ENV, "").strip().lower() or default
    if policy not in POLICIES:
        raise ValueError(f"{POLICY_ENV} must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "default":
        return "default"
    if GLIBC_ENV in os.environ:
        return "env"  # the user chose a threshold; glibc already applied it
    if platform.libc_ver()[0] != "glibc":
        return "not glibc"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        ok = libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold))
    except (OSError, AttributeError):
        return "failed"
    return "pinned" if ok == 1 else "failed"
