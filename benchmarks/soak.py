"""Soak each backend with `openhood soak` and print one table: RSS growth mid-run → end, slope,
requests, top site. The issue's goal: < 1% over 30 minutes (or 100,000 requests) per backend.

Each run starts its own server (`openhood soak --model`), so runs do not share memory history.
int8 needs a quantized model folder (`openhood quantize`): pass it with --int8-model.

    .venv/bin/python benchmarks/soak.py                         # 30 min per backend (the goal)
    .venv/bin/python benchmarks/soak.py --seconds 60 --backends numpy   # a quick look
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from openhood.models.registry import default_model_dir


def run(label: str, model: str, serve_args: str, args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "openhood.cli", "soak", "--model", model, "--seconds", str(args.seconds),
           "--requests", str(args.requests), "--max-growth", str(args.max_growth), "--out", str(out),
           "--serve-args", serve_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not (out / "soak.json").is_file():
        raise SystemExit(f"{label}: soak failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"label": label, "exit": proc.returncode, **json.loads((out / "soak.json").read_text())["analysis"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1800.0)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--max-growth", type=float, default=1.0)
    ap.add_argument("--backends", default="numpy,onnxruntime,int8")
    ap.add_argument("--int8-model", help="a quantized model folder for the int8 run")
    ap.add_argument("--out", default=None, help="keep each run's report under this folder")
    args = ap.parse_args()
    base = Path(args.out or tempfile.mkdtemp(prefix="openhood-soak-bench-"))
    model = str(default_model_dir())
    configs = {"numpy": (model, "--backend numpy"), "onnxruntime": (model, "--backend onnxruntime"),
               "int8": (args.int8_model, "--backend numpy --precision int8")}
    rows = []
    for name in args.backends.split(","):
        folder, serve_args = configs[name]
        if folder is None:
            print(f"{name}: skipped (give --int8-model)", file=sys.stderr)
            continue
        rows.append(run(name, folder, serve_args, args, base / name))
    print(f"| backend | requests | seconds | RSS mid → end (MB) | growth (fitted) | raw | slope KB/s | verdict (limit {args.max_growth:g}%) | top site |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["growth"]["rss"]
        site = r["top_sites"][0] if r["top_sites"] else {"site": "-", "size_delta": 0}
        print(f"| {r['label']} | {r['requests']} | {r['duration_s']:.0f} | {g['fit_mid'] / 2**20:.1f} → {g['fit_end'] / 2**20:.1f} "
              f"| {g['growth_pct']:+.2f}% | {g['raw_growth_pct']:+.2f}% | {g['slope_per_s'] / 1024:+.1f} | {r['verdict']} "
              f"| `{Path(site['site']).name}` {site['size_delta'] / 1024:+.0f} KB |")
    print(f"reports: {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
