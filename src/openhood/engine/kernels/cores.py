"""How many CPU cores this process may really use: affinity mask and cgroup CPU quota.

``os.cpu_count()`` reports the host's cores, not this process's share. Two things cut it down:
the affinity mask (``taskset``, a cpuset cgroup: ``os.sched_getaffinity``) and a CFS quota
(Kubernetes CPU limits: cgroup v2 ``cpu.max`` = "200000 100000" means 2 cores' worth of time
per period; cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``). A thread pool sized to the
host on a 2-core quota runs its threads in bursts and then sits throttled for the rest of the
period, which is the worst possible tail latency. ``detect_cores`` takes the smaller of the two,
rounding a fractional quota up (1.5 cores → 2 threads: rounding down would leave half a core
unused), and every pool in openhood is sized from ``available_cores()``.

The trade-off: read once per process (``available_cores`` is cached); a quota changed while
the server runs is not followed. Other processes merely *competing* for the cores (a noisy
neighbour) are invisible here: that is the scheduler's business (docs/server.md).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class CoreBudget:
    """What was found: the affinity count, the quota in cores (None: no quota) and where from."""

    affinity: int
    quota: float | None = None
    quota_source: str = ""

    @property
    def cores(self) -> int:
        """Threads worth running: the affinity count, capped by the quota rounded up (>= 1)."""
        if self.quota is None:
            return max(1, self.affinity)
        return max(1, min(self.affinity, math.ceil(self.quota - 1e-9)))

    def describe(self) -> str:
        """For the start-up log: ``2 cores (affinity 4, cgroup v2 quota 1.50 cores at /sys/...)``."""
        quota = f", {self.quota_source} quota {self.quota:.2f} cores" if self.quota is not None else ", no cgroup quota"
        return f"{self.cores} cores (affinity {self.affinity}{quota})"


def affinity_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_paths(proc_self_cgroup: Path) -> dict[str, str]:
    """Controller → this process's cgroup path; ``""`` is the v2 unified hierarchy.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "cgroup"
    >>> _ = f.write_text("2:cpu,cpuacct:/pod1\\n0::/pod2\\n")
    >>> sorted(_cgroup_paths(f).items())
    [('', '/pod2'), ('cpu', '/pod1'), ('cpuacct', '/pod1')]
    """
    paths: dict[str, str] = {}
    for line in (_read(proc_self_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _dirs_up(base: Path, path: str) -> list[Path]:
    """``base/path`` and each parent up to ``base``: a limit set on any ancestor applies."""
    here = base / path.lstrip("/")
    dirs = [here]
    while here != base and base in here.parents:
        here = here.parent
        dirs.append(here)
    return dirs


def cgroup_quota(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> tuple[float | None, str]:
    """The tightest CPU quota in cores on this process's cgroup or its ancestors (v2, then v1)."""
    paths = _cgroup_paths(proc_self_cgroup)
    limits: list[tuple[float, str]] = []
    if "" in paths:  # v2: "max 100000" (no limit) or "<quota> <period>"
        for d in _dirs_up(root, paths[""]):
            fields = (_read(d / "cpu.max") or "").split()
            if len(fields) == 2 and fields[0] != "max" and int(fields[1]) > 0:
                limits.append((int(fields[0]) / int(fields[1]), f"cgroup v2 {d / 'cpu.max'}"))
    if "cpu" in paths:  # v1: quota -1 means no limit
        for mount in (root / "cpu,cpuacct", root / "cpu"):
            for d in _dirs_up(mount, paths["cpu"]):
                quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                if quota and period and int(quota) > 0 and int(period) > 0:
                    limits.append((int(quota) / int(period), f"cgroup v1 {d / 'cpu.cfs_quota_us'}"))
    if not limits:
        return None, ""
    return min(limits)


def detect_cores(
    root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP, affinity: int | None = None
) -> CoreBudget:
    quota, source = cgroup_quota(root, proc_self_cgroup)
    return CoreBudget(affinity if affinity is not None else affinity_count(), quota, source)


@lru_cache(maxsize=1)
def core_budget() -> CoreBudget:
    """This process's budget, detected once."""
    return detect_cores()


def available_cores() -> int:
    """Threads worth running in this process (see the module docstring)."""
    return core_budget().cores
