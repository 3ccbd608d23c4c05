"""Give back resident memory a warmed-up process no longer uses: the JIT compiler's pages and
free heap.

numba links openhood's kernels with LLVM (``libllvmlite.so``, ~180 MB mapped). Compiling or
loading the cached kernels on the first forward faults 60-70 MB of that library's code and
read-only data into the process; after warm-up nothing executes it until a kernel meets a new
type signature, yet those pages stay mapped and count in RSS. They are clean, file-backed and
never written (``r-xp``/``r--p`` mappings with no anonymous pages), so ``madvise(MADV_DONTNEED)``
unmaps them safely: the page cache keeps them, and a later compile faults back in what it
touches. ``malloc_trim(0)`` then returns the free pages inside glibc's heap (the loader's and
the first prefill's temporaries) to the OS.

The trade-off: a compile after the release pays page faults (a few ms, once), and RSS is a
fairer measure of what the process holds, not a smaller footprint on the machine: the library
pages stay in the page cache, shared and reclaimable, like any file's. Only mappings that hold
no private (copy-on-write) page are touched; a writable mapping or relocated read-only data
(RELRO) is left alone, so dropping a page can never lose a write. Linux only; elsewhere nothing
is done and the report says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any

MADV_DONTNEED = 4  # <sys/mman.h> on Linux
COMPILER_LIBRARIES = ("libllvmlite",)  # mappings whose path contains one of these are the compiler's
_MAP_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/self/smaps with the fields the release needs (sizes in bytes)."""

    start: int
    end: int
    perms: str
    path: str
    rss: int
    anonymous: int


@dataclass(frozen=True)
class ReleaseReport:
    compiler_bytes: int  # resident compiler pages unmapped
    mappings: int  # how many mappings they came from
    heap_trimmed: bool  # malloc_trim returned memory
    skipped: str = ""  # why nothing was done ("" when something was)


def read_smaps(path: str = "/proc/self/smaps") -> list[Mapping]:
    """The process's mappings with their resident and anonymous (private, written) bytes."""
    out: list[Mapping] = []
    cur: dict[str, Any] | None = None

    def close() -> None:
        if cur is not None:
            out.append(Mapping(**cur))

    with open(path) as f:
        for line in f:
            m = _MAP_LINE.match(line)
            if m:
                close()
                cur = {
                    "start": int(m[1], 16),
                    "end": int(m[2], 16),
                    "perms": m[3],
                    "path": m[4],
                    "rss": 0,
                    "anonymous": 0,
                }
            elif cur is not None and line.startswith(("Rss:", "Anonymous:")):
                key = "rss" if line.startswith("Rss:") else "anonymous"
                cur[key] = int(line.split()[1]) * 1024
    close()
    return out


def droppable(m: Mapping, libraries: tuple[str, ...] = COMPILER_LIBRARIES) -> bool:
    """A compiler library's mapping whose resident pages are all clean copies of the file:
    never writable, no private page (so no relocation or write would be lost), something resident."""
    return any(lib in m.path for lib in libraries) and "w" not in m.perms and m.anonymous == 0 and m.rss > 0


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def release_idle_memory() -> ReleaseReport:
    """Unmap the compiler's resident clean pages and trim the heap; safe to call at any time
    (a thread running LLVM code meanwhile faults its pages back in)."""
    libc = _libc()
    if libc is None:
        return ReleaseReport(0, 0, False, skipped="not Linux with glibc")
    try:
        maps = [m for m in read_smaps() if droppable(m)]
    except OSError as exc:
        return ReleaseReport(0, 0, False, skipped=f"smaps unreadable: {exc.strerror}")
    freed = 0
    for m in maps:
        if libc.madvise(m.start, m.end - m.start, MADV_DONTNEED) == 0:
            freed += m.rss
    trimmed = bool(libc.malloc_trim(0))
    return ReleaseReport(freed, len(maps), trimmed)


_once = threading.Lock()
_released: ReleaseReport | None = None


def release_after_warm_up() -> ReleaseReport | None:
    """``release_idle_memory`` the first time it is called in this process (a model's first
    decode step: by then every kernel of the step loop is compiled); None afterwards."""
    global _released
    if _released is not None or not _once.acquire(blocking=False):
        return None
    try:
        if _released is None:
            _released = release_idle_memory()
            return _released
        return None
    finally:
        _once.release()
