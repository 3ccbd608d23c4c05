"""glibc's dynamic mmap threshold against a pinned one: embedding throughput and RSS.

Each run is a fresh process (the malloc policy is per process): two 1-thread NumPy engines,
a warm-up, then 40 server-like calls of random size (1–32 texts, unsorted) and one pass over
all texts length-sorted at batch 16; it prints both rates and VmRSS at the end. Policies
alternate, ``--rounds`` times, so drift in the machine's speed hits both alike.

    .venv/bin/python benchmarks/malloc_policy.py --rounds 4 --thresholds 4194304
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import random, sys, time
from openhood.process.allocator import apply_malloc_policy
if sys.argv[1] != "default":
    apply_malloc_policy("pinned", int(sys.argv[1]))
from openhood import Embedder
from openhood.corpus import read_texts
texts = read_texts(sys.argv[2], limit=int(sys.argv[3]))
emb = Embedder.from_pretrained(None, threads=1, workers=2)
emb.embed(texts[:64], batch_size=16)
rng = random.Random(0)
t0, n = time.perf_counter(), 0
for _ in range(40):
    k = rng.choice([1, 2, 4, 8, 16, 32])
    emb.embed(rng.sample(texts, k), batch_size=k)
    n += k
varied = n / (time.perf_counter() - t0)
t0 = time.perf_counter()
emb.embed(texts, batch_size=16)
sorted_rate = len(texts) / (time.perf_counter() - t0)
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024
print(varied, sorted_rate, rss)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default="/work/shared/data/dev_corpus.jsonl")
    p.add_argument("--texts", type=int, default=1200)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--thresholds", default="4194304", help="comma list of pinned thresholds in bytes")
    args = p.parse_args()
    policies = ["default", *args.thresholds.split(",")]
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in policies}
    for r in range(args.rounds):
        for policy in policies:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, policy, args.corpus, str(args.texts)],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            results[policy].append(tuple(map(float, out.stdout.split())))
            v, s, rss = results[policy][-1]
            print(f"round {r + 1} {policy}: varied {v:.1f}/s sorted {s:.1f}/s RSS {rss:.0f} MB", flush=True)
    base = statistics.mean(s for _, s, _ in results["default"])
    print("\n| malloc policy | varied calls /s | sorted batch-16 /s | vs default | RSS MB |")
    print("|---|---|---|---|---|")
    for policy, rows in results.items():
        name = "glibc default (dynamic)" if policy == "default" else f"pinned at {int(policy) >> 10} KiB"
        v, s = statistics.mean(r[0] for r in rows), statistics.mean(r[1] for r in rows)
        rss = f"{min(r[2] for r in rows):.0f}–{max(r[2] for r in rows):.0f}"
        print(f"| {name} | {v:.1f} | {s:.1f} | {s / base:.2f}x | {rss} |")


if __name__ == "__main__":
    main()
