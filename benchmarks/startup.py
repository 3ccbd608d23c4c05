"""Start-up time, each figure split into stages, beside anchors measured in the same run.

Every row is a fresh process timed from spawn:

(a) ``import openhood`` (beside ``python -c pass``, the interpreter alone);
(b) ``openhood embed x`` to its exit, after printing the first embedding; anchor: a minimal
    ``tokenizers`` + ONNX Runtime script doing the same (load tokenizer and model, embed "x");
(c) ``openhood generate --max-tokens 1`` to its exit, after printing the first token; anchor:
    llama-cpp-python (``.venv-ref``, ``make bench-env``) loading the same GGUF and printing one
    token for the same prompt (chat template rendered once, both read it raw; greedy, 2 threads);
(d) ``openhood serve`` (default model) → ``/health/ready`` 200;
(e) ``openhood serve`` with four models: all-MiniLM-L6-v2, paraphrase-MiniLM-L3-v2 (its bare
    ONNX file through ``openhood import-onnx``), EfficientNet-Lite0 (``openhood convert``) and
    SmolLM2-135M (GGUF) → ``/health/ready`` 200.

Stages: (b) and (c) are also run as in-process drivers that time the same library calls the
commands make (imports / model read / tokenizer / first call = kernel load + run, against a
second call = run alone); (d) and (e) are split by the server's own JSON log lines (models
loaded, app built, calibration, warm-up per model). "cold" = empty openhood cache (numba's
JIT-compiled kernels and the start-up records: every JIT kernel compiles, calibration runs),
"warm" = the same cache, filled by the cold run. The ahead-of-time kernels that installation
builds (``openhood kernels --build``, run by ``make``) are part of the installation, not of the
cache, as a compiled extension would be; the header prints where each set loads from, and the
row "(b) ..., kernels not installed" runs with an empty install folder (``OPENHOOD_KERNEL_DIR``):
its cold run is a first start that has to build them. The OS page cache is never dropped (it is shared with
the other users of the machine). Medians of ``--repeats`` warm runs, one cold run per row.

Memory at rest: RSS of ``serve`` (default model) after readiness and after 1,000 sequential
``/v1/embeddings`` requests, against the minimal script's RSS after its embedding.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from openhood.diskcache import cpu_model
from openhood.generate.bundled import default_gguf_path
from openhood.models import default_model_dir

ROOT = Path(__file__).resolve().parent.parent
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
RSS = "int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) * 1024"

MINIMAL = f"""
import sys
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer
folder, onnx_path = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(folder + "/tokenizer.json")
sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
enc = tok.encode("x")
ids = np.asarray([enc.ids], dtype=np.int64)
feeds = {{i.name: (ids if i.name == "input_ids" else np.ones_like(ids) if i.name == "attention_mask" else np.zeros_like(ids))
         for i in sess.get_inputs()}}
print(sess.run(None, feeds)[0].shape)
print("RSS", {RSS})
"""

LLAMA_CPP = """
import sys
from llama_cpp import Llama
path, prompt = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
llm = Llama(model_path=path, n_ctx=512, n_threads=2, n_batch=512, verbose=False)
out = llm.create_completion(prompt, max_tokens=1, temperature=0.0)
print(out["choices"][0]["text"])
"""

# Stage drivers: the library calls the commands make, each timed (seconds since process start).
EMBED_DRIVER = """
import json, time
t0 = time.perf_counter()
stages = {}
import numpy
stages["import numpy"] = time.perf_counter() - t0
from openhood.embedder import Embedder
stages["import openhood (embedder, tokenizer, numba)"] = time.perf_counter() - t0 - sum(stages.values())
def lap(name, fn):
    t = time.perf_counter(); out = fn(); stages[name] = time.perf_counter() - t; return out
emb = lap("model read (tokenizer + weights)", Embedder.from_pretrained)
lap("first embedding (kernel load + run)", lambda: emb.embed(["x"]))
lap("second embedding (run alone)", lambda: emb.embed(["x"]))
print(json.dumps(stages))
"""

GENERATE_DRIVER = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
stages = {"import numpy": time.perf_counter() - t0}
from openhood.engine.models.llama import Llama
from openhood.formats.gguf import GGUFFile
from openhood.tokenizer.bpe import BPETokenizer, spec_from_gguf
stages["import openhood (decoder, numba)"] = time.perf_counter() - t0 - stages["import numpy"]
def lap(name, fn):
    t = time.perf_counter(); out = fn(); stages[name] = time.perf_counter() - t; return out
g = lap("GGUF read (header + index, mmap)", lambda: GGUFFile(sys.argv[1]))
tok = lap("tokenizer (vocabulary, BPE kernel load)", lambda: BPETokenizer(spec_from_gguf(g)))
model = lap("weights (quantized blocks kept)", lambda: Llama.from_gguf(g, weights="quantized"))
ids = np.asarray(tok.encode_list(open(sys.argv[2], encoding="utf-8").read(), parse_special=True), np.int64)
def step():
    cache = model.new_cache(1, len(ids) + 1)
    return int(model.forward([ids], [0], cache)[0].argmax())
lap("first token (kernel load + prefill)", step)
lap("second prefill (run alone)", step)
print(json.dumps(stages))
"""


def has_llama_cpp() -> bool:
    """Whether ``make bench-env`` built llama-cpp-python (the (c) anchor)."""
    if not REF_PYTHON.exists():
        return False
    return subprocess.run([str(REF_PYTHON), "-c", "import llama_cpp"], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_timed(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, out.stdout


def log_stages(log_path: Path, spawn_wall: float) -> tuple[dict[str, float], dict[str, float]]:
    """Server log → (milestones in s since spawn, per-model warm-up seconds)."""
    marks: dict[str, float] = {}
    warm: dict[str, float] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        at = dt.datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp() - spawn_wall
        msg = rec.get("message", "")
        if rec.get("event") == "cpu_layout":
            marks.setdefault("models loaded (imports + model read)", at)
        elif msg.startswith("Waiting for application startup"):
            marks.setdefault("app built (HTTP stack imports)", at)
        elif rec.get("event") == "token_budget":
            warm[f"calibration {rec['model']} ({'cached' if rec.get('cached') else 'measured'})"] = rec["calibration_s"]
        elif " warmed up for buckets " in msg:
            name = msg.split()[1]
            warm[f"warm-up {name}"] = float(msg.rsplit(" in ", 1)[1].split()[0])
        elif msg.startswith("Application startup complete"):
            marks.setdefault("warmed up (all models)", at)
    return marks, warm


def run_serve(env: dict, args: list[str], log_path: Path, requests: int = 0) -> dict:
    port = free_port()
    spawn_wall = time.time()
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "openhood.cli", "serve", "--port", str(port), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    out: dict = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(60.0, connect=1.0)) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited during start-up:\n{log_path.read_text()[-2000:]}")
                try:
                    if c.get("/health/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
            out["ready_s"] = time.perf_counter() - t0
            if requests:
                p = psutil.Process(proc.pid)
                out["rss_ready"] = p.memory_info().rss
                for i in range(requests):
                    r = c.post("/v1/embeddings", json={"input": f"request {i} at rest"})
                    assert r.status_code == 200, r.text
                out["rss_after"] = p.memory_info().rss
    finally:
        proc.terminate()
        proc.wait(60)
    out["marks"], out["warm"] = log_stages(log_path, spawn_wall)
    return out


def prepare_models(tmp: Path, env: dict) -> dict[str, Path]:
    """The four-model set's folders (not timed): imported ONNX, converted EfficientNet."""
    from openhood.engine.models.efficientnet import bundled_checkpoint
    from openhood.models.registry import PARAPHRASE_MAX_LENGTH, PARAPHRASE_ONNX_PACKAGE
    from openhood.packages import packaged_file

    para, effnet, onnx = tmp / "para", tmp / "effnet", tmp / "model.onnx"
    cli = [sys.executable, "-m", "openhood.cli"]
    quiet = {"env": env, "check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([*cli, "import-onnx", str(packaged_file(PARAPHRASE_ONNX_PACKAGE, ".onnx")), str(para),
                    "--max-length", str(PARAPHRASE_MAX_LENGTH)], **quiet)  # fmt: skip
    subprocess.run([*cli, "convert", str(bundled_checkpoint()), str(effnet)], **quiet)
    subprocess.run([*cli, "export", "--output", str(onnx)], **quiet)
    return {"para": para, "effnet": effnet, "onnx": onnx}


def fmt_stages(stages: dict[str, float]) -> str:
    return "; ".join(f"{k} {v:.2f}" for k, v in stages.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm runs per row (median); one cold run each")
    ap.add_argument("--requests", type=int, default=1000, help="requests before the second RSS reading")
    args = ap.parse_args()
    load0 = os.getloadavg()
    kernels_status = "; ".join(
        " ".join(line.split()[:2])
        for line in subprocess.run(
            [sys.executable, "-m", "openhood.cli", "kernels"], capture_output=True, text=True, check=True, timeout=120
        ).stdout.splitlines()
    )
    folder, gguf = str(default_model_dir()), str(default_gguf_path())
    # Children run as a default Python does: writing and reading bytecode caches (__pycache__),
    # whatever this shell says (PYTHONDONTWRITEBYTECODE=1 made every start recompile openhood's
    # modules from source, ~0.1 s of (b), a cost the anchors' installed packages never paid).
    dropped = ("NUMBA_CACHE_DIR", "OPENHOOD_CACHE_DIR", "PYTHONDONTWRITEBYTECODE")
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        cold_dir = tmp / "cache"
        env = {**base, "OPENHOOD_CACHE_DIR": str(cold_dir)}
        paths = prepare_models(tmp, {**base, "OPENHOOD_CACHE_DIR": str(tmp / "prep-cache")})
        from openhood.generate import Generator

        prompt_file = tmp / "prompt.txt"
        prompt_file.write_text(Generator(gguf).render("What is the capital of France?"), encoding="utf-8")
        minimal = tmp / "minimal.py"
        minimal.write_text(MINIMAL)
        llama = tmp / "llama_cpp_one_token.py"
        llama.write_text(LLAMA_CPP)
        four = ["--model", f"minilm={folder}", "--model", f"para={paths['para']}",
                "--model", f"effnet={paths['effnet']}", "--model", f"smollm2={gguf}"]  # fmt: skip
        py = sys.executable
        rows: dict[str, dict] = {}

        def row(name: str, cold, warm) -> None:
            # Each cold run starts from an empty cache: the row's first run fills it for the warm ones.
            shutil.rmtree(cold_dir, ignore_errors=True)
            c = cold()
            rows[name] = {"cold": c, "warm": [warm() for _ in range(args.repeats)]}
            print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)  # progress; the tables come at the end

        t = lambda cmd: lambda: run_timed(cmd, env)[0]  # noqa: E731
        rows["python -c pass"] = {"cold": None, "warm": [t([py, "-c", "pass"])() for _ in range(args.repeats)]}
        row("(a) import openhood", t([py, "-c", "import openhood"]), t([py, "-c", "import openhood"]))
        mini = [py, str(minimal), folder, str(paths["onnx"])]
        rows["anchor: minimal tokenizers + onnxruntime"] = {
            "cold": None,
            "warm": [t(mini)() for _ in range(args.repeats)],
        }
        row(
            "(b) openhood embed x",
            t([py, "-m", "openhood.cli", "embed", "x"]),
            t([py, "-m", "openhood.cli", "embed", "x"]),
        )
        bare = {**env, "OPENHOOD_KERNEL_DIR": str(tmp / "no-installed-kernels")}
        embed_bare = lambda: run_timed([py, "-m", "openhood.cli", "embed", "x"], bare)[0]  # noqa: E731
        row("(b) openhood embed x, kernels not installed", embed_bare, embed_bare)
        # Stage splits right after their row, on the cache it filled (the next row empties it).
        emb_stages = json.loads(run_timed([py, "-c", EMBED_DRIVER], env)[1])
        if has_llama_cpp():
            lc = [str(REF_PYTHON), str(llama), gguf, str(prompt_file)]
            rows["anchor: llama-cpp-python, 1 token"] = {"cold": None, "warm": [t(lc)() for _ in range(args.repeats)]}
        prompt = prompt_file.read_text(encoding="utf-8")
        gen = [py, "-m", "openhood.cli", "generate", "--raw", "--temperature", "0", "--max-tokens", "1", prompt]
        row("(c) openhood generate --max-tokens 1", t(gen), t(gen))
        gen_stages = json.loads(run_timed([py, "-c", GENERATE_DRIVER, gguf, str(prompt_file)], env)[1])
        serve_runs: dict[str, list[dict]] = {}

        def serve_row(name: str, serve_args: list[str]) -> None:
            runs = serve_runs.setdefault(name, [])

            def once() -> float:
                runs.append(run_serve(env, serve_args, tmp / f"serve-{len(runs)}.log"))
                return runs[-1]["ready_s"]

            row(name, once, once)

        serve_row("(d) serve -> /health/ready (default model)", [])
        serve_row("(e) serve -> /health/ready (4 models)", four)
        mem = run_serve(env, [], tmp / "serve-memory.log", requests=args.requests)
        mini_rss = int(run_timed(mini, env)[1].split("RSS")[1])

    load1 = os.getloadavg()
    anchor_b = statistics.median(rows["anchor: minimal tokenizers + onnxruntime"]["warm"])
    print(f"CPU: {cpu_model()}; {len(os.sched_getaffinity(0))} cores usable; Python {sys.version.split()[0]}")
    print("ahead-of-time kernel sets (openhood kernels): " + kernels_status)
    print("children's bytecode cache: on (PYTHONDONTWRITEBYTECODE unset, as in a default Python)")
    print(f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f} (1 min)\n")
    print(f"| start-up, fresh process | cold s | warm s (median of {args.repeats}) | warm min s | x anchor |")
    print("|---|---|---|---|---|")
    anchors = {
        "(b)": anchor_b,
        "(c)": statistics.median(rows["anchor: llama-cpp-python, 1 token"]["warm"])
        if "anchor: llama-cpp-python, 1 token" in rows
        else None,
        "(d)": anchor_b,
    }
    d_med = statistics.median(rows["(d) serve -> /health/ready (default model)"]["warm"])
    anchors["(e)"] = d_med
    for name, r in rows.items():
        med = statistics.median(r["warm"])
        a = anchors.get(name[:3])
        ratio = f"{med / a:.2f}x {'(d)' if name.startswith('(e)') else ''}" if a else ""
        cold = f"{r['cold']:.2f} ({r['cold'] / med:.1f}x warm)" if r["cold"] is not None else ""
        print(f"| {name} | {cold} | {med:.2f} | {min(r['warm']):.2f} | {ratio} |")
    print("\nGoals (warm): (b) <= 1.5x minimal; (c) <= 1.5x llama.cpp; (d) <= 3 s idle and <= 2x minimal's (b);")
    print("(e) <= 1.5x (d); cold <= 3x warm.\n")
    print("Stages (s), warm cache:")
    print(f"- (b) embed driver: {fmt_stages(emb_stages)}")
    print(f"- (c) generate driver: {fmt_stages(gen_stages)}")
    for name, runs in serve_runs.items():
        cold, last = runs[0], runs[-1]
        print(
            f"- {name}, cold: since spawn {fmt_stages(cold['marks'])}; ready {cold['ready_s']:.2f}; {fmt_stages(cold['warm'])}"
        )
        print(
            f"- {name}, warm: since spawn {fmt_stages(last['marks'])}; ready {last['ready_s']:.2f}; {fmt_stages(last['warm'])}"
        )
    mib = 2**20
    print(
        f"\nMemory at rest: serve (default model) RSS {mem['rss_ready'] / mib:.0f} MiB after readiness, "
        f"{mem['rss_after'] / mib:.0f} MiB after {args.requests} requests; minimal script {mini_rss / mib:.0f} MiB "
        f"({mem['rss_ready'] / mini_rss:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
