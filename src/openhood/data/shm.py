"""POSIX shared-memory segments the decode pool owns from birth to unlink, tracker-free.

Why not plain ``multiprocessing.shared_memory.SharedMemory``: on Python < 3.13 every
``SharedMemory(name)`` — attaching included — registers the name with the resource tracker,
and ``unlink()`` unregisters it. With several workers attaching the same segment, their
register/unregister messages interleave in the shared tracker, which then prints KeyError
tracebacks or "leaked shared_memory objects" warnings at exit, and a worker started outside
the parent's tracker would unlink the segment when *it* exits. So we create, map and unlink
with ``shm_open``/``mmap``/``shm_unlink`` directly (what ``SharedMemory`` itself calls) and take
over the tracker's one useful job, cleaning up after a dead owner: a segment's name carries
its owner's pid (``openhood-<pid>-<random>``) and every new pool first removes the segments
whose owner is gone (``sweep_stale``). Memory is reserved with ``posix_fallocate`` at creation,
so a too-small /dev/shm fails there with ENOSPC instead of a SIGBUS in a worker mid-write.
"""

from __future__ import annotations

import _posixshmem  # the C module behind multiprocessing.shared_memory (POSIX only)
import contextlib
import mmap
import os
import re
import secrets
from pathlib import Path

PREFIX = "openhood-"
SHM_DIR = Path("/dev/shm")  # where Linux exposes POSIX shared memory as files
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-[0-9a-f]+$")


class ShmTooSmall(RuntimeError):
    """/dev/shm has less free space than the pool's slots need."""


class Segment:
    """One mapped segment; the creating process unlinks it, attaching processes only unmap it."""

    def __init__(self, name: str, buf: mmap.mmap, owner: bool):
        self.name, self.buf, self.owner = name, buf, owner

    @classmethod
    def create(cls, size: int) -> Segment:
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.posix_fallocate(fd, 0, size)  # commit the pages now: ENOSPC here, not SIGBUS later
            buf = mmap.mmap(fd, size)
        except OSError as e:
            _posixshmem.shm_unlink("/" + name)
            raise ShmTooSmall(f"could not reserve {size:,} bytes of shared memory: {e}. {FIX}") from e
        finally:
            os.close(fd)
        return cls(name, buf, owner=True)

    @classmethod
    def attach(cls, name: str) -> Segment:
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            return cls(name, mmap.mmap(fd, os.fstat(fd).st_size), owner=False)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Unlink (owner) and unmap. Unlink comes first: it always succeeds, while unmapping
        fails with BufferError while NumPy views of the buffer are alive; the kernel frees the
        memory when the last mapping goes."""
        if self.owner:
            self.owner = False
            with contextlib.suppress(FileNotFoundError):
                _posixshmem.shm_unlink("/" + self.name)
        with contextlib.suppress(BufferError):
            self.buf.close()


FIX = (
    "Fix: give the process a larger /dev/shm — `docker run --shm-size=<size>`, in Kubernetes an "
    "`emptyDir: {medium: Memory, sizeLimit: <size>}` volume mounted at /dev/shm, on a host "
    "`mount -o remount,size=<size> /dev/shm` — or ask for fewer slots or a smaller output size."
)


def check_free(need: int, shm_dir: Path = SHM_DIR) -> None:
    """Refuse, with the exact numbers and the fix, when shm_dir cannot hold ``need`` bytes."""
    if not shm_dir.is_dir():
        return
    st = os.statvfs(shm_dir)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise ShmTooSmall(
            f"the decode pool needs {need:,} bytes ({need / 2**20:.1f} MiB) of shared memory but "
            f"{shm_dir} has {free:,} bytes ({free / 2**20:.1f} MiB) free. {FIX}"
        )


def owned_segments(shm_dir: Path = SHM_DIR) -> list[tuple[str, int]]:
    """(name, owner pid) of every openhood segment in shm_dir."""
    if not shm_dir.is_dir():
        return []
    return [(n, int(m.group(1))) for n in os.listdir(shm_dir) if (m := _NAME.match(n))]


def sweep_stale(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink segments whose owner process is dead (killed with SIGKILL, OOM-killed); return
    their names. A pid reused by an unrelated live process keeps its segment (a leak, never a
    wrong unlink); containers that share /dev/shm must share the pid namespace too."""
    removed = []
    for name, pid in owned_segments(shm_dir):
        if pid != os.getpid() and not _alive(pid):
            try:
                _posixshmem.shm_unlink("/" + name)
                removed.append(name)
            except FileNotFoundError:
                pass  # another pool swept it first
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True
