"""Flame graph of the served path at saturation: `openhood serve` + closed-loop load + `openhood profile`.

Starts one server on a loopback port, drives it with ``openhood loadtest --concurrency N`` and,
while the load runs, records it with py-spy (``openhood profile``, no ``--native``: the Python
frames are the ones the HTTP path can change; engine time shows as the backend's ``run``). Prints
the share of samples under a few frames of interest (read from the SVG's titles) so a change is
seen as numbers, not only as pictures. Run it under the benchmark lock:

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/http_profile.py \\
        --corpus /work/shared/data/dev_corpus.jsonl --out docs/flamegraphs/http-after.svg
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import BIN, Server, wait_ready

# Frames whose inclusive share of the samples is printed (substring of py-spy's frame title).
FRAMES = (
    "run (openhood/backends/",
    "embeddings (openhood/server/routes/embeddings.py",
    "log_access",
    "finish (",
    "json_response",
    "observe_",
    "prepare_texts",
    "_run_once (asyncio",
    "uvloop",
    "httptools",
)


def frame_shares(svg: str) -> dict[str, float]:
    """Inclusive sample share of each ``FRAMES`` entry: py-spy writes '<title>frame (file:line) (N samples, P%)'."""
    titles = [html.unescape(t) for t in re.findall(r"<title>(.*?)</title>", svg)]
    parsed = []
    for t in titles:
        m = re.search(r"\(([\d,]+) samples?, ([\d.]+)%\)$", t)
        if m:
            parsed.append((t, float(m.group(2))))
    return {f: round(sum(p for t, p in parsed if f in t), 1) for f in FRAMES}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--server", default="openhood-onnxruntime")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--serve-args", default="")
    p.add_argument("--port", type=int, default=8290)
    p.add_argument("--out", required=True, help="the SVG to write")
    args = p.parse_args()
    server = Server(args.server, args.port, argparse.Namespace(serve_args=args.serve_args))
    try:
        wait_ready(server.url, server.proc)
        load = subprocess.Popen(
            [
                str(BIN / "openhood"),
                "loadtest",
                server.url,
                "--corpus",
                args.corpus,
                "--max-chars",
                "1000",
                "--concurrency",
                str(args.clients),
                "--duration",
                str(args.seconds + 4),
                "--warmup",
                "2",
                "--timeout",
                "10",
                "--wait-ready",
                "0",
                "--json",
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        subprocess.run(
            [
                str(BIN / "openhood"),
                "profile",
                "--pid",
                str(server.proc.pid),
                "--duration",
                str(args.seconds),
                "--out",
                args.out,
            ],
            check=True,
        )
        out, _ = load.communicate(timeout=args.seconds + 120)
    finally:
        server.stop()
    import json

    summary = json.loads(out)
    print(
        f"{args.server} at {args.clients} clients: {summary['throughput_rps']:.1f} req/s, "
        f"P50 {summary['latency_ms']['p50']:.1f} ms, errors {summary['error_count']}"
    )
    for frame, share in frame_shares(Path(args.out).read_text()).items():
        print(f"  {share:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
