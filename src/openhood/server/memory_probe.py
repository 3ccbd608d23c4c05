"""What ``/debug/memory`` reports: tracemalloc growth by site, gc object counts by type, and the
process's RSS/USS, open fds and threads — each as a diff against the previous call.

tracemalloc is started only by ``MemoryProbe.start()`` (the server calls it when
``--debug-endpoints`` is on), because tracing every allocation costs CPU and memory on the whole
request path (see docs/soak.md for the measured overhead); one frame per trace keeps that cost
and the snapshot small. ``gc.get_objects()`` walks every tracked object (tens of ms with a model
loaded), so the endpoint is for sampling every second or so, not for every request. The
trade-off: sites are ``file:line`` of the innermost frame only, which names the allocating line
but not who called it.
"""

from __future__ import annotations

import gc
import os
import threading
import tracemalloc
from collections import Counter
from typing import Any

import psutil

TRACE_FRAMES = 1
DEFAULT_TOP = 20


class MemoryProbe:
    """Keeps the previous snapshot and type counts so each call returns what grew since the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # two scrapes at once would diff against a half-replaced state
        self._snapshot: tracemalloc.Snapshot | None = None
        self._types: Counter[str] = Counter()
        self._process = psutil.Process()

    @staticmethod
    def start() -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(TRACE_FRAMES)

    def sample(self, top: int = DEFAULT_TOP) -> dict[str, Any]:
        with self._lock:
            return self._sample(max(1, min(top, 500)))

    def _sample(self, top: int) -> dict[str, Any]:
        out: dict[str, Any] = {"process": self.process_stats()}
        if tracemalloc.is_tracing():
            snap = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
            current, peak = tracemalloc.get_traced_memory()
            sites = []
            previous = self._snapshot
            first = previous is None  # nothing to diff against yet: this call sets the baseline
            if previous is not None:
                for stat in snap.compare_to(previous, "lineno")[:top]:
                    frame = stat.traceback[0]
                    sites.append(
                        {
                            "site": f"{frame.filename}:{frame.lineno}",
                            "size_delta": stat.size_diff,
                            "count_delta": stat.count_diff,
                            "size": stat.size,
                            "count": stat.count,
                        }
                    )
            self._snapshot = snap
            out["tracemalloc"] = {"traced_bytes": current, "peak_bytes": peak, "first_call": first, "sites": sites}
        else:
            out["tracemalloc"] = None
        types = Counter({_type_name(t): n for t, n in Counter(map(type, gc.get_objects())).items()})
        growth = Counter({k: types.get(k, 0) - self._types.get(k, 0) for k in types.keys() | self._types.keys()})
        self._types = types
        out["gc"] = {
            "objects": sum(types.values()),
            "top_types": [{"type": k, "count": n} for k, n in types.most_common(top)],
            "growing_types": [{"type": k, "count_delta": d} for k, d in growth.most_common(top) if d > 0],
            # objects in flight at one call and gone at the next (futures, locks) shrink back:
            # a client summing both lists sees their net, not a false leak
            "shrinking_types": [
                {"type": k, "count_delta": d} for k, d in growth.most_common()[: -top - 1 : -1] if d < 0
            ],
            "collections": [s["collections"] for s in gc.get_stats()],
        }
        return out

    def process_stats(self) -> dict[str, Any]:
        mem = self._process.memory_full_info()  # USS needs /proc/self/smaps: a few ms
        return {
            "rss_bytes": mem.rss,
            "uss_bytes": getattr(mem, "uss", None),
            "fds": _open_fds(),
            "threads": self._process.num_threads(),
        }


def _type_name(t: type) -> str:
    """``tuple`` for builtins, ``module.Qualname`` otherwise (two classes may share a short name)."""
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        return None
