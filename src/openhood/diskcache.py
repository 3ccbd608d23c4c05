"""Small JSON records kept between processes in openhood's per-user cache directory.

Start-up measures things that do not change between two starts of the same model on the same
machine (the token budgets ``scheduler.calibrate`` derives from the engine's speed, the time of
a full batch): they are kept here, keyed on what they depend on, so a restart reads them in a
millisecond instead of re-measuring for a second or more. numba's compiled kernels live in the
same directory (``numba/``, openhood/__init__.py).

Where: ``records/`` in the cache directory (``openhood.cachedir``). A record is one JSON file named by the SHA-256 of its key, holding the
key, the value and the SHA-256 of both. A file that does not parse, whose hash does not match
(corrupted, truncated) or whose key is another (foreign) is ignored with one warning line and
the caller measures again and rewrites it: never a crash, never a wrong value. A write goes to a
temporary file in the same directory and is renamed over the record (atomic on POSIX), so two
processes starting at once each write a whole file, the last rename wins and a reader never sees
half of one. A cache that cannot be written (read-only home) costs the measurement, not the start.

The trade-off: a record is as good as the start that measured it (a start on a loaded machine
keeps smaller, safer budgets until the record is deleted or its key changes); in exchange every
later start skips the measurement. Delete the directory to measure again.

>>> key = {"what": "doctest"}
>>> record_path(key, root=Path("/c")).name == digest(key) + ".json"
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from openhood.cachedir import cache_root

RECORDS = "records"  # the records' sub-directory (numba's is "numba")

log = logging.getLogger("openhood.cache")


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest(obj: Any) -> str:
    """SHA-256 of ``obj``'s canonical JSON."""
    return hashlib.sha256(_canonical(obj)).hexdigest()


def record_path(key: dict, root: Path | None = None) -> Path:
    return (root or Path(cache_root())) / RECORDS / f"{digest(key)}.json"


def _cpuinfo(*fields: str) -> str:
    """The first of ``fields`` that /proc/cpuinfo's first processor lists, its value ("" if none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                name, _, value = line.partition(":")
                if name.strip() in fields:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    """The CPU's model name (``lscpu``'s "Model name"), else the platform's processor string."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The CPU's feature flags as the kernel lists them (x86 "flags", ARM "Features"); "" if unknown."""
    return _cpuinfo("flags", "Features")


def files_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    """(relative name, size, mtime ns) of the model's files: a file, or a folder's files (sorted)."""
    if path.is_file():
        st = path.stat()
        return [(path.name, st.st_size, st.st_mtime_ns)]
    out = []
    for p in sorted(path.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            st = p.stat()
            out.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
    return out


def machine_key() -> dict:
    """What a measurement of speed depends on besides the model: the CPU and the cores we may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "machine": platform.machine(), "cores": cores}


def check(key: Any, path: Path | None = None) -> tuple[Any | None, str]:
    """(value, "") for a whole record of ``key``; (None, "") when there is none; (None, what is
    wrong) when one is there but cannot be trusted. Logs nothing (``read`` does). ``path``: the
    record's file, by default ``record_path(key)`` (``openhood.aot`` keeps one beside each library)."""
    path = path or record_path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None, ""  # absent (the usual first start) or unreadable: measure
    try:
        record = json.loads(data)
        ok = (
            isinstance(record, dict)
            and record.get("sha256") == digest({"key": record.get("key"), "value": record.get("value")})
            and _canonical(record.get("key")) == _canonical(key)  # as JSON: a tuple in ``key`` reads back a list
        )
    except ValueError:
        ok = False
    return (record["value"], "") if ok else (None, "corrupted or foreign")


def read(key: Any, path: Path | None = None) -> Any | None:
    """The value stored under ``key``, or None when there is none or it cannot be trusted."""
    value, problem = check(key, path)
    if problem:
        log.warning("cache record %s is %s: ignored, measuring again", path or record_path(key), problem)
    return value


def write(key: Any, value: Any, path: Path | None = None) -> bool:
    """Store ``value`` (JSON-serializable) under ``key``: a temporary file, then an atomic rename;
    False (with one warning line) when it could not be written."""
    path = path or record_path(key)
    body = _canonical({"key": key, "value": value, "sha256": digest({"key": key, "value": value})})
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as exc:
        log.warning("cache record %s not written (%s): the next start measures again", path, exc)
        return False
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
