"""Per-op profile of the decoder's decode step, against the machine's measured memory bandwidth.

At batch 1 a decode step multiplies one activation row by every weight matrix: ~2 flops per
weight loaded, far too few to hide the load, so the step is bandwidth-bound and the honest
yardstick is bytes moved / time versus what this machine can stream. ``measure_bandwidth``
times the same kind of operation (a BLAS matrix-vector product over a matrix far bigger than
the caches, same threads, same moment); ``profile_decode`` charges each op's time (``OpLaps``
marks in ``Llama.forward``) with its bytes read and reports GB/s and % of that roofline.
The trade-off: ~30 ``perf_counter`` pairs per layer; invisible beside matmuls of ~0.1 ms.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from openhood.engine.models.llama import OpLaps


def measure_bandwidth(mbytes: int = 256, seconds: float = 0.8) -> float:
    """Best GB/s of ``W @ x`` with W an (n, 4096) float32 matrix of ``mbytes`` MB (read once per call)."""
    n = mbytes * 2**20 // (4 * 4096)
    w = np.random.default_rng(0).standard_normal((n, 4096), dtype=np.float32)
    x = np.ones(4096, dtype=np.float32)
    w @ x  # warm-up: pages touched, BLAS threads up
    best, deadline, runs = float("inf"), time.perf_counter() + seconds, 0
    while runs < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        w @ x
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return w.nbytes / best / 1e9


def profile_decode(model: Any, batch: int = 1, prompt_len: int = 32, steps: int = 16) -> tuple[OpLaps, float]:
    """Run ``steps`` timed decode steps at ``batch`` after a prompt of ``prompt_len``; (laps, wall seconds)."""
    cache = model.new_cache(batch, prompt_len + steps + 1)
    rng = np.random.default_rng(0)
    slots = list(range(batch))
    model.forward([rng.integers(3, 1000, prompt_len) for _ in slots], slots, cache)
    laps = OpLaps()
    tokens = [np.array([100])] * batch
    wall = 0.0
    for _ in range(steps):
        laps.restart()
        t0 = time.perf_counter()
        logits = model.forward(tokens, slots, cache, laps=laps)
        tokens = [np.array([int(t)]) for t in logits.argmax(axis=1)]
        laps.mark("sampling (argmax)", nbytes=logits.nbytes)
        wall += time.perf_counter() - t0
    return laps, wall


def profile_table(laps: OpLaps, wall: float, steps: int, bandwidth_gbs: float) -> list[dict[str, Any]]:
    """Rows per op, most expensive first: ms/step, share, MB/step, GB/s, % of bandwidth roofline."""
    rows: list[dict[str, Any]] = []
    for label, sec in laps.seconds.items():
        mb = laps.nbytes[label] / steps / 1e6
        gbs = laps.nbytes[label] / max(sec, 1e-12) / 1e9
        rows.append(
            {
                "op": label,
                "ms_per_step": 1e3 * sec / steps,
                "share": sec / max(wall, 1e-12),
                "mb_per_step": mb,
                "gb_s": gbs,
                "roofline_pct": 100 * gbs / bandwidth_gbs,
            }
        )
    rows.sort(key=lambda r: -r["ms_per_step"])
    return rows
