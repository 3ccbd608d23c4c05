"""Thread hand-off cost: one empty parallel region (post a share to the other thread, run ours,
join), RowSplitter's own threads vs a ThreadPoolExecutor doing the same (submit + result),
after a gap of 0, 0.5 and 5 ms of busy work on the calling thread (the worker sleeps longer,
and on this VM a sleeping vCPU halts and must be woken by an interrupt).

    PYTHONPATH=$PWD/src flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/handoff.py

Prints median, p10 and p90 in microseconds over ``--calls`` regions per gap, the two contenders
alternating region by region so both see the same load.
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

from openhood.engine.kernels.parallel import RowSplitter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    splitter = RowSplitter(2)
    pool = ThreadPoolExecutor(1)

    def nothing(a: int = 0, b: int = 0) -> None:
        return None

    def executor_region() -> None:  # what RowSplitter did before: submit the share, run ours, wait
        chunks = itertools.count()

        def drain() -> None:
            while next(chunks) < 2:
                nothing()

        future = pool.submit(drain)
        drain()
        future.result()

    contenders = {
        "RowSplitter": lambda: splitter.run_chunks(nothing, 2, 1, 1, 0),
        "ThreadPoolExecutor": executor_region,
    }
    print(f"empty 2-thread region, {args.calls} calls per gap, microseconds (median / p10 / p90)")
    for gap in (0.0, 0.0005, 0.005):
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.calls):
            for name, region in contenders.items():
                t = time.perf_counter()
                while time.perf_counter() - t < gap:  # busy: the worker's thread sleeps this long
                    pass
                t0 = time.perf_counter()
                region()
                times[name].append(time.perf_counter() - t0)
        for name, ts in times.items():
            ts.sort()
            n = len(ts)
            print(
                f"  gap {gap * 1e3:3.1f} ms  {name:<19} {ts[n // 2] * 1e6:7.1f} {ts[n // 10] * 1e6:7.1f} {ts[9 * n // 10] * 1e6:7.1f}"
            )
    splitter.close()
    pool.shutdown()


if __name__ == "__main__":
    main()
