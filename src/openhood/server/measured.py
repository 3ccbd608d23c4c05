"""A served model's start-up measurements, read from the per-machine cache or taken and stored.

Two numbers come from timing the engine at start-up: the calibrated token budgets
(``scheduler.calibrate``, ~1 s) and the time of one full batch of the longest bucket (what the
queue cap and the drain estimate are derived from). Both depend only on the machine, the
model's files and how the engine is run, so they are kept in ``openhood.diskcache`` under a key
of exactly those: the CPU model, the usable cores, each model file's name, size and mtime, the
engine's facts (backend, precision, per-worker and wide threads, workers), the buckets, the
surge budget, the full-batch rows and the calibration's probe size. A restart reads the record
instead of measuring; anything in the key that changes (a new CPU, a re-exported model, other
flags) measures again. Only timings are cached, never a model output: a bad record can cost
throughput or latency until it is rebuilt, never correctness.

The trade-off: the budgets of a start on a busy machine persist (smaller, safer batches) until
the record is deleted; ``openhood serve --max-batch-tokens`` skips calibration altogether.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openhood import diskcache
from openhood.models import ServedModel
from openhood.scheduler.calibrate import PROBE_TOKENS, Calibration

KIND = "openhood.server.measured/1"  # bump when the value's meaning changes


@dataclass(frozen=True)
class Measured:
    calibration: Calibration | None  # None when budgets were configured, not calibrated
    batch_s: float  # the slowest worker's full batch of the longest bucket
    cached: bool  # read from the cache (no timing ran)


def cache_key(model: ServedModel, bounds: tuple[int, ...], surge: int, rows: int, calibrated: bool) -> dict[str, Any]:
    backends = [*model.backends, *([model.wide] if model.wide is not None else [])]
    return {
        "kind": KIND,
        "machine": diskcache.machine_key(),
        "files": diskcache.files_fingerprint(Path(model.folder)),
        "engine": {
            **{k: v for k, v in model.info.items() if isinstance(v, str | int | float | bool) or v is None},
            "threads": [int(b.threads) for b in backends],
            "workers": model.workers,
        },
        "buckets": list(bounds),
        "surge_tokens": surge,
        "full_batch_rows": rows,
        "probe_tokens": PROBE_TOKENS,
        "calibrated": calibrated,
    }


def _to_json(m: Measured) -> dict[str, Any]:
    cal = m.calibration
    return {
        "batch_s": m.batch_s,
        "calibration": None
        if cal is None
        else {
            "lone_s": cal.lone_s,
            "cost_per_token": {str(t): c for t, c in cal.cost_per_token.items()},
            "budgets": cal.budgets,
            "seconds": cal.seconds,
        },
    }


def _from_json(value: dict[str, Any], bounds: tuple[int, ...], calibrated: bool, read_s: float) -> Measured | None:
    """A record's value, or None when its shape does not fit (then it is measured again)."""
    try:
        batch_s = float(value["batch_s"])
        cal = None
        if calibrated:
            c = value["calibration"]
            budgets = [int(b) for b in c["budgets"]]
            costs = {int(t): float(v) for t, v in c["cost_per_token"].items()}
            # each budget must hold one item of its bucket (what the batcher accepts)
            if len(budgets) != len(bounds) or sorted(costs) != sorted(bounds):
                return None
            if any(b < t for b, t in zip(budgets, bounds, strict=True)):
                return None
            cal = Calibration(float(c["lone_s"]), costs, budgets, read_s)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not batch_s > 0:
        return None
    return Measured(cal, batch_s, cached=True)


def measure_or_read(key: dict[str, Any], measure: Callable[[], Measured], bounds: tuple[int, ...]) -> Measured:
    """The cached measurements for ``key`` when a sound record exists, else ``measure()`` stored."""
    t0 = time.perf_counter()
    value = diskcache.read(key)
    if isinstance(value, dict):
        found = _from_json(value, bounds, bool(key["calibrated"]), time.perf_counter() - t0)
        if found is not None:
            return found
        diskcache.log.warning("cache record for %s does not fit its key: measuring again", key["kind"])
    fresh = measure()
    diskcache.write(key, _to_json(fresh))
    return fresh
