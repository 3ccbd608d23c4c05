"""Start-up time: `openhood embed` and `openhood serve` → ready, cold and warm numba cache, beside
a minimal `tokenizers` + ONNX Runtime script doing the same (load tokenizer and model, embed one
text), all in one run on the same machine.

Each row is a fresh process, timed from spawn to the first embedding (embed: process exit after
printing it; serve: /health/ready 200 and then one POST /v1/embeddings answered). "cold" uses an
empty NUMBA_CACHE_DIR (every kernel compiles), "warm" the one the cold run filled. Medians of
--repeats runs; the ratio column is against the minimal script's median (goal: warm <= 1.5x).

    .venv/bin/python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from openhood.models import default_model_dir

MINIMAL = """
import sys
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer
folder, onnx_path = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(folder + "/tokenizer.json")
sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
enc = tok.encode("x")
ids = np.asarray([enc.ids], dtype=np.int64)
feeds = {i.name: (ids if i.name == "input_ids" else np.ones_like(ids) if i.name == "attention_mask" else np.zeros_like(ids))
         for i in sess.get_inputs()}
print(sess.run(None, feeds)[0].shape)
"""


def run_process(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - t0


def run_serve(env: dict) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "openhood.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(30.0, connect=1.0)) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError("serve exited during start-up")
                try:
                    if c.get("/health/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
            assert c.post("/v1/embeddings", json={"input": "x"}).status_code == 200
        return time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    folder = str(default_model_dir())
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "model.onnx")
        subprocess.run(
            [sys.executable, "-m", "openhood.cli", "export", "--output", onnx_path],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        script = Path(tmp, "minimal.py")
        script.write_text(MINIMAL)
        base_env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
        rows: dict[str, list[float]] = {}
        rows["minimal tokenizers + onnxruntime"] = [
            run_process([sys.executable, str(script), folder, onnx_path], base_env) for _ in range(args.repeats)
        ]
        for name, fn in (
            ("openhood embed", lambda env: run_process([sys.executable, "-m", "openhood.cli", "embed", "x"], env)),
            ("openhood serve -> ready + 1 embedding", run_serve),
        ):
            cold, warm = [], []
            for i in range(args.repeats):
                env = {**base_env, "NUMBA_CACHE_DIR": os.path.join(tmp, f"numba-{name.split()[1]}-{i}")}
                cold.append(fn(env))  # empty cache: every kernel compiles
                warm.append(fn(env))  # the same cache, now filled
            rows[f"{name} (cold cache)"] = cold
            rows[f"{name} (warm cache)"] = warm
    anchor = statistics.median(rows["minimal tokenizers + onnxruntime"])
    print(f"start-up to first embedding, median of {args.repeats} fresh processes each")
    print(f"{'':52s} {'median s':>9s} {'min s':>7s} {'x minimal':>10s}")
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"{name:52s} {med:9.2f} {min(times):7.2f} {med / anchor:9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
