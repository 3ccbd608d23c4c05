"""ONNX Runtime's pool threads after a run: spinning (ORT's default) vs stopped (openhood's).

ORT's intra-op threads spin between the parallel sections of a run and, by default, keep
spinning for a while after it returns. ``backends/ort_session.py`` sets
``session.force_spinning_stop`` (``SPIN_AFTER_RUN = False``) so that a server's other engines
get the core back at once. Two servers on loopback, identical but for that setting, each
measured alternately:

1. the server process's CPU seconds in the second after one short request on an idle server
   (what the spinning costs: with nothing else to run, it is all spin);
2. one closed-loop client for ``--duration`` s on the dev corpus: requests/s and P50 (what
   stopping could cost a lone request: the pool thread must be woken at the next run).

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/ort_spin.py \\
        --corpus /work/shared/data/dev_corpus.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import httpx
from serving import loadtest, process_cpu_s, wait_ready


def start(port: int, spin: bool) -> subprocess.Popen:
    code = (
        "import sys\nimport openhood.backends.ort_session as o\n"
        f"o.SPIN_AFTER_RUN = {spin}\nfrom openhood.cli import main\n"
        f"sys.exit(main(['serve', '--backend', 'onnxruntime', '--port', '{port}', '--log-level', 'warning']))"
    )
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--port", type=int, default=18530)
    args = ap.parse_args()
    # what serving.loadtest reads
    run = argparse.Namespace(corpus=args.corpus, max_chars=1000, duration=args.duration, warmup=1)
    modes = {"stopped after a run (openhood)": False, "spinning after a run (ORT default)": True}
    procs = {label: (args.port + i, start(args.port + i, spin)) for i, (label, spin) in enumerate(modes.items())}
    after: dict[str, list[float]] = {label: [] for label in modes}
    lone: dict[str, list[tuple[float, float]]] = {label: [] for label in modes}
    try:
        for port, proc in procs.values():
            wait_ready(f"http://127.0.0.1:{port}", proc)
        with httpx.Client(timeout=httpx.Timeout(10.0), limits=httpx.Limits(max_connections=2)) as client:
            for rnd in range(args.rounds):
                for label, (port, proc) in procs.items():
                    time.sleep(1.0)  # idle first: no earlier run's spin in the window
                    client.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": "a short sentence"})
                    c0 = process_cpu_s(proc.pid)
                    time.sleep(1.0)
                    after[label].append(process_cpu_s(proc.pid) - c0)
                    _, s = loadtest(f"http://127.0.0.1:{port}", run, ["--concurrency", "1"], rnd)
                    lone[label].append((s["throughput_rps"], s["latency_ms"]["p50"]))
    finally:
        for _, proc in procs.values():
            proc.terminate()
            proc.wait(timeout=60)
    print(f"ONNX Runtime, {args.rounds} rounds alternating; median (min-max)")
    print("| pool threads | CPU s in the 1 s after one request | 1 client req/s | 1 client P50 ms |")
    print("|---|---:|---:|---:|")
    for label in modes:
        cpu = after[label]
        rps = [r for r, _ in lone[label]]
        p50 = [p for _, p in lone[label]]
        print(
            f"| {label} | {statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | "
            f"{statistics.median(rps):.1f} ({min(rps):.1f}-{max(rps):.1f}) | "
            f"{statistics.median(p50):.2f} ({min(p50):.2f}-{max(p50):.2f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
