"""Generation through `openhood serve` against the `Generator` (what `openhood generate` runs), one run.

Run inside the shared lock so benchmarks do not overlap on the 2 cores::

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/generate_server.py --tokens 32

Measures, with ratios against anchors measured in the same run:
1. one stream: decode tokens/s (after the first token) and time to first token, in-process with
   ``Generator.stream`` (the `openhood generate` path, same threads) and through the server's
   streaming ``/v1/completions`` (HTTP, SSE, the step scheduler); the process running the
   anchor is idle while the server runs, and the other way round;
2. N concurrent streams through the server (continuous batching): aggregate tokens/s against
   the single stream, and inter-token P50/P99.
Prompts are raw openings that run on for many tokens (no chat template, so no early EOS); the
tables count the tokens actually generated.
The comparison with llama-cpp-python's server at 1/4/16 streams is ``benchmarks/
generation_serving.py`` (issue 17's load-test half).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The history of the printing press begins",
    "Here is a long list of fruits: apples, pears,",
    "Dear diary, today I woke up early and",
    "The recipe for bread is simple: first",
    "In the year 2100, cities will",
    "Ten facts about the ocean: 1.",
    "The old lighthouse keeper told us that",
]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_once(client: httpx.Client, prompt: str, tokens: int) -> dict:
    """One streaming completion: token arrival times (one SSE chunk per text piece)."""
    t0 = time.perf_counter()
    times: list[float] = []
    usage = None
    body = {
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
    assert usage is not None
    return {"start": t0, "times": times, "tokens": usage["completion_tokens"], "end": time.perf_counter()}


def decode_rate(run: dict) -> float:
    times = run["times"]
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def anchor(gguf: Path, tokens: int, threads: int) -> dict:
    """``Generator.stream`` in this process (the CLI's loop) on the first prompt."""
    from openhood.engine.kernels.blas import blas
    from openhood.generate import GenerationConfig, Generator, SamplingParams

    blas().set_threads_local(threads)
    gen = Generator(gguf)
    config = GenerationConfig(max_tokens=tokens, sampling=SamplingParams(temperature=0.0))
    list(gen.stream(PROMPTS[0], GenerationConfig(max_tokens=2, sampling=config.sampling), raw=True))  # warm
    t0 = time.perf_counter()
    times = [time.perf_counter() for _ in gen.stream(PROMPTS[0], config, raw=True)]
    return {"start": t0, "times": times, "tokens": len(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from openhood.generate.bundled import default_gguf_path

    gguf = default_gguf_path()
    load = os.getloadavg()[0]
    print(
        f"# generation through the server vs Generator: {gguf.name}, {args.threads} threads, {args.tokens} tokens, "
        f"greedy; load average at start {load:.1f}"
    )
    cli = anchor(gguf, args.tokens, args.threads)

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "openhood.cli",
        "serve",
        "--port",
        str(port),
        "--model",
        f"smollm2={gguf}",
        "--workers",
        "1",
        "--threads",
        str(args.threads),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(
            base_url=url,
            timeout=httpx.Timeout(600.0, connect=3.0),
            limits=httpx.Limits(max_connections=args.streams + 2),
        ) as c:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if c.get("/health/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            stream_once(c, PROMPTS[1], 2)  # warm
            one = stream_once(c, PROMPTS[0], args.tokens)
            runs: list[dict] = [{} for _ in range(args.streams)]

            def worker(i: int) -> None:
                runs[i] = stream_once(c, PROMPTS[i % len(PROMPTS)], args.tokens)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.streams)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(60)

    cli_rate, srv_rate = decode_rate(cli), decode_rate(one)
    print("\n### One stream (greedy, first prompt)\n")
    print("| path | tokens | TTFT ms | decode tokens/s | vs Generator |")
    print("|---|---|---|---|---|")
    print(
        f"| Generator.stream (openhood generate) | {cli['tokens']} | {(cli['times'][0] - cli['start']) * 1000:.0f} | "
        f"{cli_rate:.1f} | 1.00x |"
    )
    print(
        f"| openhood serve, /v1/completions stream | {one['tokens']} | {(one['times'][0] - one['start']) * 1000:.0f} | "
        f"{srv_rate:.1f} | {srv_rate / cli_rate:.2f}x |"
    )
    gaps = sorted(b - a for r in runs for a, b in zip(r["times"], r["times"][1:], strict=False))
    total = sum(r["tokens"] for r in runs)
    agg = total / wall
    single = one["tokens"] / (one["end"] - one["start"])
    print(f"\n### {args.streams} concurrent streams through the server (continuous batching)\n")
    print("| streams | tokens | wall s | aggregate tokens/s | vs 1 stream (end to end) | inter-token P50 ms | P99 ms |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.streams} | {total} | {wall:.2f} | {agg:.1f} | {agg / single:.2f}x | "
        f"{statistics.median(gaps) * 1000:.0f} | {gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] * 1000:.0f} |"
    )
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
