"""What starting tracemalloc (as ``--debug-endpoints`` does) costs on the embedding path.

Times the same work in one process with tracing off, then on (1 frame, as the server uses),
alternating rounds so machine load drifts hit both sides alike, and prints the ratio of medians:
(a) tokenize + embed a batch of short texts with the NumPy engine, (b) tokenize only (pure
Python, the allocation-heavy part). Also prints tracemalloc's own memory. No absolute times.

    .venv/bin/python benchmarks/tracemalloc_overhead.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from openhood import Embedder
from openhood.soak.traffic import WORDS

TEXTS = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(5 + i % 30)) for i in range(32)]


def timed(fn, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    emb = Embedder.from_pretrained(threads=1)
    work = {
        "embed 32 texts": (lambda: emb.embed(TEXTS), 2),
        "tokenize 32 texts": (lambda: emb.tokenizer.encode_batch(TEXTS), 50),
    }
    for name, (fn, repeat) in work.items():
        fn()
        off, on = [], []
        for _ in range(args.rounds):
            off.append(timed(fn, repeat))
            tracemalloc.start(1)
            on.append(timed(fn, repeat))
            tracemalloc.stop()
        print(
            f"{name:18s} tracemalloc on/off = {statistics.median(on) / statistics.median(off):.2f}x "
            f"(median of {args.rounds} alternating rounds)"
        )
    tracemalloc.start(1)
    emb.embed(TEXTS)
    print(f"tracemalloc's own memory after one embed call: {tracemalloc.get_tracemalloc_memory() / 1024:.0f} KB")
    tracemalloc.stop()


if __name__ == "__main__":
    main()
