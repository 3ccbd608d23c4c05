"""Do the machine's cores have FMA units of their own? float32 sgemm in one process, then the
same in N processes at once (N = the cores this process may use), each with one BLAS thread.

If every process keeps the lone process's GFLOP/s, the cores are real; if the sum stays near
the lone figure, the vCPUs are hyperthreads of fewer physical cores and a second thread buys
little for compute-bound kernels (docs/vision.md § Engine). Processes, not threads, so neither
the GIL nor a BLAS thread pool sits between them.

    .venv/bin/python -u benchmarks/core_sharing.py [--size 1024] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import os, sys, time
import numpy as np
n, seconds = int(sys.argv[1]), float(sys.argv[2])
a = np.ones((n, n), np.float32); b = np.ones((n, n), np.float32)
a @ b  # warm
calls, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    a @ b
    calls += 1
print(2 * n**3 * calls / (time.perf_counter() - t0) / 1e9)
"""


def run(k: int, size: int, seconds: float) -> list[float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(size), str(seconds)], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(k)
    ]
    return [float(p.communicate(timeout=seconds * 10 + 60)[0]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    alone = run(1, args.size, args.seconds)[0]
    together = run(cores, args.size, args.seconds)
    print(f"sgemm {args.size}x{args.size}, one BLAS thread per process, {cores} cores usable")
    print(f"  1 process alone:        {alone:6.1f} GFLOP/s")
    print(
        f"  {cores} processes at once:   "
        + " + ".join(f"{g:.1f}" for g in together)
        + f" = {sum(together):.1f} GFLOP/s"
    )
    print(f"  sum / alone: {sum(together) / alone:.2f}x (≈ {cores}: separate cores; ≈ 1: one core's FMA units shared)")


if __name__ == "__main__":
    main()
