"""``openhood profile``: record a py-spy flame graph of a running process.

py-spy samples a live Python process from outside (reading its memory via ptrace), so the
server runs unmodified and at full speed while we look. We only wrap it: find the binary (the
venv's ``bin/`` first, where the ``profile`` extra installs it, then PATH), check the pid, run
``py-spy record`` with a bounded duration, and turn its failures into clear messages. The
trade-off: sampling (default 100 Hz) misses very short functions, and native frames (BLAS,
ONNX Runtime) appear only with ``--native``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class ProfilerError(RuntimeError):
    """py-spy is missing, the pid is wrong, or py-spy failed (e.g. no ptrace permission)."""


def find_py_spy() -> str:
    local = Path(sys.executable).parent / "py-spy"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerError(
            "py-spy is not installed: run `pip install 'openhood[profile]'` "
            "(or `make install`, which installs the profile extra)"
        )
    return found


def check_pid(pid: int) -> None:
    if pid <= 0:
        raise ProfilerError(f"invalid pid {pid}")
    try:
        os.kill(pid, 0)  # signal 0: existence and permission check, sends nothing
    except ProcessLookupError:
        raise ProfilerError(f"no process with pid {pid} (is the server running? `pgrep -f 'openhood serve'`)") from None
    except PermissionError:
        pass  # it exists; py-spy itself will say whether it may attach


def record(
    pid: int,
    out: str | Path,
    duration_s: float = 30.0,
    rate_hz: int = 100,
    native: bool = False,
    subprocesses: bool = False,
    idle: bool = False,
    py_spy: str | None = None,
) -> Path:
    """Run ``py-spy record`` for ``duration_s`` and return the SVG path."""
    if not (0 < duration_s <= 3600):
        raise ProfilerError(f"--duration must be in (0, 3600] s, got {duration_s}")
    exe = py_spy or find_py_spy()
    check_pid(pid)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--output",
        str(out),
        "--duration",
        str(max(1, round(duration_s))),
        "--rate",
        str(rate_hz),
        "--format",
        "flamegraph",
    ]
    if native:
        cmd.append("--native")  # py-spy must pause the process to unwind native stacks
    else:
        cmd.append("--nonblocking")  # do not pause the server for each sample
    if subprocesses:
        cmd.append("--subprocesses")
    if idle:
        cmd.append("--idle")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    except subprocess.TimeoutExpired:
        raise ProfilerError(f"py-spy did not finish within {duration_s + 60:g}s") from None
    if proc.returncode != 0 or not out.is_file():
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = msg[-1] if msg else f"exit code {proc.returncode}"
        hint = ""
        if "permission" in detail.lower() or "ptrace" in detail.lower():
            hint = (
                " — py-spy needs ptrace rights: run as root, or set "
                "/proc/sys/kernel/yama/ptrace_scope to 0, or give the container CAP_SYS_PTRACE"
            )
        raise ProfilerError(f"py-spy failed: {detail}{hint}")
    return out
