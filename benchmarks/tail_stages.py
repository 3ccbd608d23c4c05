"""Where a length bucket's tail goes: server stages (queue, inference) at P50 / P90 / P99 under open-loop load.

Starts ``openhood serve`` on loopback with its access log (one JSON line per request: tokens,
queue_ms, inference_ms, total_ms, whether it ran on the wide engine), drives it with
``openhood loadtest --rate`` for ``--requests`` requests, and prints, per token bucket, the
client's P50 / P99 and the server's stages at the same percentiles, so a bucket that fails
the SLO (P99 > 3 × P50) shows whether its slow requests waited (queue) or ran slowly
(inference: a bigger batch, or cores shared with other work).

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/tail_stages.py \\
        --corpus /work/shared/data/dev_corpus.jsonl --backend onnxruntime --rate 30
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from serving import Server, loadtest, wait_ready

EDGES = ((0, 32), (33, 64), (65, 128), (129, 256))  # the load test's token buckets (LENGTH_LABEL_EDGES)


def access_lines(log: Path) -> list[dict]:
    rows = []
    for line in log.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "request" and e.get("route") == "/v1/embeddings" and e.get("status") == 200:
            rows.append(e)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "numpy"])
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=18560)
    ap.add_argument("--serve-args", default="", help="extra `openhood serve` flags")
    args = ap.parse_args()
    run = argparse.Namespace(  # what serving.Server and serving.loadtest read
        corpus=args.corpus,
        max_chars=1000,
        duration=round(args.requests / args.rate + 1, 1),
        warmup=1,
        serve_args=f"--log-level info {args.serve_args}",  # info: one access line per request
    )
    server = Server(f"openhood-{args.backend}", args.port, run)
    try:
        wait_ready(server.url, server.proc)
        _, client = loadtest(server.url, run, ["--rate", str(args.rate)], args.seed)
    finally:
        server.stop()
    rows = access_lines(server.log_path)
    print(
        f"{args.backend}, open loop {args.rate:g} req/s, seed {args.seed}: {client['ok']} requests measured by the client"
    )
    print("| tokens | client P50 / P99 ms (P99/P50) | server total P50 / P90 / P99 | queue | inference | ran wide |")
    print("|---|---|---|---|---|---:|")
    by_name = {b["bucket"]: b for b in client["buckets"]}
    for lo, hi in EDGES:
        mine = [e for e in rows if lo <= e["tokens"] <= hi]
        if not mine:
            continue
        b = by_name.get(f"{lo}-{hi}", {})
        cells = []
        for key in ("total_ms", "queue_ms", "inference_ms"):
            q = np.percentile([e[key] for e in mine], [50, 90, 99])
            cells.append(" / ".join(f"{v:.1f}" for v in q))
        wide = np.mean([bool(e.get("wide")) for e in mine])
        head = f"{b['p50']:.1f} / {b['p99']:.1f} ({b['ratio']:.2f})" if b.get("p50") else "-"
        print(f"| {lo}-{hi} ({len(mine)}) | {head} | {cells[0]} | {cells[1]} | {cells[2]} | {wide:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
