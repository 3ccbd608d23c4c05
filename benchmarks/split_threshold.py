"""Batch-1 EfficientNet-Lite0 pass on two threads at several ``conv.MIN_PARALLEL_CONV`` values
(the multiply-adds from which a conv is split over the threads), same Executor, alternating.

    PYTHONPATH=$PWD/src flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/split_threshold.py

Prints median, p10 and p90 ms per pass for 2^26 (batch 1 on one thread), 2^24, 2^22, 2^20.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from vision import PHOTOS, convert_bundled

from openhood.engine.graph import conv
from openhood.engine.graph.runtime import Executor
from openhood.engine.models.efficientnet import INPUT_NAME, load_efficientnet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    model = load_efficientnet(convert_bundled(tmp.name))
    x = model.pixels([sorted(PHOTOS.glob("*.jpg"))[0].read_bytes()])  # (1, 224, 224, 3)
    ex = Executor(model.graph(fused=True), args.threads)

    def run(log2: int) -> None:
        default, conv.MIN_PARALLEL_CONV = conv.MIN_PARALLEL_CONV, 1 << log2
        try:
            ex.run({INPUT_NAME: x})
        finally:
            conv.MIN_PARALLEL_CONV = default

    powers = [26, 24, 22, 20]
    for p in powers:  # warm-up: compile, allocate
        run(p)
    times: dict[int, list[float]] = {p: [] for p in powers}
    for r in range(args.rounds):
        for p in powers if r % 2 else powers[::-1]:
            t0 = time.perf_counter()
            run(p)
            times[p].append(time.perf_counter() - t0)
    print(f"batch 1, {args.threads} threads, {args.rounds} rounds, ms per pass (median / p10 / p90)")
    for p, ts in times.items():
        ts.sort()
        n = len(ts)
        print(f"  2^{p}: {statistics.median(ts) * 1e3:6.2f} {ts[n // 10] * 1e3:6.2f} {ts[9 * n // 10] * 1e3:6.2f}")
    ex.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
