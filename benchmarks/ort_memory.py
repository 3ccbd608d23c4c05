"""ONNX Runtime's memory with varying input shapes: CPU arena and memory pattern on/off.

ORT's CPU arena keeps the blocks it grew for the largest shapes seen; memory-pattern planning
records an allocation plan per input shape. Both help a fixed shape and can cost memory when
every request has a new (batch, length). Each configuration runs in a fresh process (so no
memory history is shared): the bundled MiniLM through the ONNX Runtime backend, ``--runs``
forward passes of random (B, T) shapes (B 1..16, T 4..128, seeded, the same sequence for every
configuration), RSS sampled after the warm-up fifth of the runs, at the middle and at the end.
It prints RSS growth mid → end, from warm-up to end, the peak, and run time relative to the
first configuration (ORT's defaults). The choice it informs lives in
``backends/ort_session.py`` (``CPU_MEM_ARENA``, ``MEM_PATTERN``).

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/ort_memory.py --runs 150
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CONFIGS = {  # label → (arena, mem pattern, shrink the arena after each run)
    "arena on, pattern on (ORT defaults)": (True, True, False),
    "arena on, pattern off": (True, False, False),
    "arena off, pattern on": (False, True, False),
    "arena off, pattern off": (False, False, False),
    "arena on + shrink each run": (True, False, True),
}


def child(arena: bool, pattern: bool, shrink: bool, runs: int, threads: int) -> dict:
    import numpy as np
    import psutil

    from openhood.backends import ort_session

    ort_session.CPU_MEM_ARENA, ort_session.MEM_PATTERN, ort_session.ARENA_SHRINK = arena, pattern, shrink
    from openhood import Embedder

    emb = Embedder.from_pretrained(backend="onnxruntime", threads=threads)
    backend = emb.backend
    rng = np.random.default_rng(0)
    proc = psutil.Process()
    rss = {}
    marks = {runs // 5: "warm", runs // 2: "mid", runs: "end"}
    t0 = time.perf_counter()
    peak = 0
    for i in range(1, runs + 1):
        b, t = int(rng.integers(1, 17)), int(rng.integers(4, 129))
        ids = rng.integers(1000, 20000, (b, t)).astype(np.int64)  # (B, T)
        backend.run(
            {
                "input_ids": ids,
                "attention_mask": np.ones((b, t), np.int64),
                "token_type_ids": np.zeros((b, t), np.int64),
            }
        )
        peak = max(peak, proc.memory_info().rss)
        if i in marks:
            rss[marks[i]] = proc.memory_info().rss
    return {"rss": rss, "peak": peak, "seconds": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=150)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*CONFIGS[args.child], args.runs, args.threads)))
        return
    print(
        f"| configuration ({args.runs} runs, random (B ≤ 16, T ≤ 128)) | RSS warm-up → mid → end (MB) | growth mid → end | growth warm-up → end | peak (MB) | time vs defaults |"
    )
    print("|---|---|---|---|---|---|")
    base = None
    for label in CONFIGS:
        out = subprocess.run(
            [sys.executable, __file__, "--runs", str(args.runs), "--threads", str(args.threads), "--child", label],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or r["seconds"]
        w, m, e = (r["rss"][k] / 2**20 for k in ("warm", "mid", "end"))
        print(
            f"| {label} | {w:.0f} → {m:.0f} → {e:.0f} | {(e - m) / m:+.1%} | {(e - w) / w:+.1%} | {r['peak'] / 2**20:.0f} | "
            f"{r['seconds'] / base:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
