"""Soak each backend with `openhood soak` and print one table: RSS growth mid-run → end, slope,
requests, top site. The issue's goal: < 1% over 30 minutes (or 100,000 requests) per backend.

Each run starts its own server (`openhood soak --model`), so runs do not share memory history.
int8 needs a quantized model folder (`openhood quantize`): pass it with --int8-model. `naive` is
the benchmark peer: benchmarks/naive_server.py (plain FastAPI + ONNX Runtime, one forward pass
per request, no batching) started with --debug-memory and soaked through `openhood soak --url`
with the same traffic and the same probe. The load average at the start and end of each run is
printed beside it (the machine is shared; a soak measures memory, so contention only lowers
the request count).

    .venv/bin/python benchmarks/soak.py                         # 30 min per backend (the goal)
    .venv/bin/python benchmarks/soak.py --seconds 60 --backends numpy   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from openhood.models.registry import default_model_dir
from openhood.soak.launch import free_port

NAIVE_SERVER = Path(__file__).resolve().parent / "naive_server.py"


def run(label: str, target: list[str], args, out: Path) -> dict:
    """One soak; ``target`` is ``--model … --serve-args …`` or ``--url …``."""
    cmd = [
        sys.executable,
        "-m",
        "openhood.cli",
        "soak",
        *target,
        "--seconds",
        str(args.seconds),
        "--requests",
        str(args.requests),
        "--max-growth",
        str(args.max_growth),
        "--out",
        str(out),
        "--sample-every",
        str(args.sample_every),
        "--ready-timeout",
        "1800",
    ]
    load_start = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not (out / "soak.json").is_file():
        raise SystemExit(f"{label}: soak failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return {
        "label": label,
        "exit": proc.returncode,
        "load": (load_start, os.getloadavg()[0]),
        **json.loads((out / "soak.json").read_text())["analysis"],
    }


def wait_ready(url: str, server: subprocess.Popen, seconds: float = 1800.0) -> None:
    """Model load and ORT's session build take a while on a loaded machine."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(url, timeout=5.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"the naive server did not become ready (exit {server.poll()})")


def run_naive(args, out: Path) -> dict:
    """The peer in its own process (ONNX Runtime, all cores), soaked over HTTP like openhood."""
    port = free_port()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, str(NAIVE_SERVER), "--backend", "onnxruntime", "--port", str(port), "--debug-memory"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}/health/ready", server)
            return run("naive FastAPI + ORT", ["--url", f"http://127.0.0.1:{port}"], args, out)
        finally:
            server.terminate()
            server.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1800.0)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--max-growth", type=float, default=1.0)
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between /debug/memory samples")
    ap.add_argument("--backends", default="numpy,onnxruntime,int8,naive")
    ap.add_argument("--int8-model", help="a quantized model folder for the int8 run")
    ap.add_argument("--out", default=None, help="keep each run's report under this folder")
    args = ap.parse_args()
    base = Path(args.out or tempfile.mkdtemp(prefix="openhood-soak-bench-"))
    model = str(default_model_dir())
    configs = {
        "numpy": (model, "--backend numpy"),
        "onnxruntime": (model, "--backend onnxruntime"),
        "int8": (args.int8_model, "--backend numpy --precision int8"),
    }
    rows = []
    for name in args.backends.split(","):
        if name == "naive":
            rows.append(run_naive(args, base / name))
            continue
        folder, serve_args = configs[name]
        if folder is None:
            print(f"{name}: skipped (give --int8-model)", file=sys.stderr)
            continue
        rows.append(run(name, ["--model", folder, "--serve-args", serve_args], args, base / name))
    print(
        f"| backend | requests | seconds | RSS mid → end (MB) | growth (fitted) | raw | slope KB/s | verdict (limit {args.max_growth:g}%) | top site | load avg start → end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["growth"]["rss"]
        site = r["top_sites"][0] if r["top_sites"] else {"site": "-", "size_delta": 0}
        print(
            f"| {r['label']} | {r['requests']} | {r['duration_s']:.0f} | {g['fit_mid'] / 2**20:.1f} → {g['fit_end'] / 2**20:.1f} "
            f"| {g['growth_pct']:+.2f}% | {g['raw_growth_pct']:+.2f}% | {g['slope_per_s'] / 1024:+.1f} | {r['verdict']} "
            f"| `{Path(site['site']).name}` {site['size_delta'] / 1024:+.0f} KB | {r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    print(f"reports: {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
