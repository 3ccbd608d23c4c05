"""Serving comparison: openhood vs the naive baseline, both backends, with `openhood loadtest`.

All servers are started on loopback ports and waited for (/health/ready), then
1. closed loop at 1, 2, 4, ... clients (max throughput and how it holds as clients grow),
   interleaved: each client count is run on every server before the next one;
2. per server, an open-loop ``--sweep`` for the highest rate meeting the SLO, started at 40% of
   the best closed-loop throughput so the sweep spends its runs near the boundary.
Every measurement is an ``openhood loadtest ... --json`` subprocess whose exact command is
printed beside its numbers, so each row can be rerun alone. Run it under the benchmark lock:

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/serving.py \\
        --corpus /work/shared/data/dev_corpus.jsonl --servers openhood-numpy,naive-numpy

Absolute numbers depend on the machine's load (the client shares the CPU with the server); the
ratios between servers measured in the same run are the result.
"""

from __future__ import annotations

import argparse
import json
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


def server_command(name: str, port: int, serve_args: list[str]) -> list[str]:
    """``openhood-<backend>[@t<N>]``, ``naive-<backend>[@t<N>]`` or ``naiveserial-<backend>``.

    ``@tN`` sets the engine's intra-op threads (default: all cores; ``openhood serve --threads``).
    """
    base, _, threads = name.partition("@t")
    kind, backend = base.split("-", 1)
    if kind == "openhood":
        head = [str(BIN / "openhood"), "serve"] + (["--threads", threads] if threads else [])
        return [*head, "--backend", backend, "--port", str(port), "--log-level", "warning", "--grace-period", "2",
                *serve_args]
    if kind in ("naive", "naiveserial"):
        cmd = [sys.executable, str(ROOT / "benchmarks" / "naive_server.py"), "--backend", backend, "--port", str(port)]
        if threads:
            cmd += ["--threads", threads]
        return cmd + (["--serial"] if kind == "naiveserial" else [])
    raise SystemExit(f"unknown server {name!r} (openhood-<backend>, naive-<backend>, naiveserial-<backend>, "
                     "optionally @t<threads>)")


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=httpx.Timeout(3.05, read=10.0), trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with code {proc.returncode} before becoming ready")
            try:
                if client.get(url + "/health/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout_s:g}s")


def loadtest(url: str, args, extra: list[str]) -> tuple[str, dict]:
    cmd = [str(BIN / "openhood"), "loadtest", url, "--corpus", args.corpus, "--max-chars", str(args.max_chars),
           "--duration", str(args.duration), "--warmup", str(args.warmup), "--seed", str(args.seed),
           "--wait-ready", "0", "--json", "--quiet", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    shown = "openhood loadtest " + " ".join(shlex.quote(c) for c in cmd[2:])
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"{shown} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return shown, json.loads(proc.stdout)


class Server:
    """One server under test, started on a loopback port with its output in a log file."""

    def __init__(self, name: str, port: int, args):
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        cmd = server_command(name, port, shlex.split(args.serve_args) if name.startswith("openhood") else [])
        # The server's output goes to a file: an unread pipe would fill up and block its logging.
        self.log_path = Path(tempfile.gettempdir()) / f"openhood-bench-{name}-{port}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        print(f"== {name}: {' '.join(cmd)}  (log: {self.log_path})", flush=True)
        self.out = {"server": name, "server_command": " ".join(cmd), "closed": [], "sweep": None}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def closed_run(server: Server, n: int, args) -> None:
    # A 10 s read timeout: closed loop measures capacity, and 64 clients on a slow server
    # legitimately wait longer than the SLO's 3 x budget default.
    shown, s = loadtest(server.url, args, ["--concurrency", str(n), "--timeout", "10"])
    row = {"clients": n, "throughput_rps": s["throughput_rps"], "p50": s["latency_ms"]["p50"],
           "p99": s["latency_ms"]["p99"], "errors": s["error_count"], "command": shown}
    server.out["closed"].append(row)
    print(f"  {server.name:<22} closed x{n:<3} {row['throughput_rps']:7.1f} req/s  P50 {row['p50'] or 0:7.1f} ms  "
          f"P99 {row['p99'] or 0:7.1f} ms  errors {row['errors']}", flush=True)


def sweep_run(server: Server, args) -> None:
    best = max((r["throughput_rps"] for r in server.out["closed"]), default=20.0)
    start = max(1.0, round(0.4 * best, 1))
    shown, res = loadtest(server.url, args, ["--sweep", "--sweep-start", str(start), "--sweep-factor", "1.3",
                                             "--sweep-max", str(round(1.5 * best, 1)), "--sweep-bisect", "2",
                                             "--sweep-repeats", str(args.repeats)])
    sw = res["sweep"]
    server.out["sweep"] = {"best_rate": sw["best_rate"], "repeat_passes": sw["repeat_passes"],
                           "repeats_run": sw["repeats_run"], "p99_spread_ms": sw["p99_spread_at_best_ms"],
                           "runs": sw["runs"], "command": shown, "best_run": res["run"]}
    for r in sw["runs"]:
        print(f"  {server.name:<22} sweep {r['phase']:>6} {r['rate']:7.1f} req/s -> {r['throughput_rps']:7.1f} req/s "
              f"P99 {r['p99'] or 0:7.1f} ms worst-bucket {r['worst_bucket_ratio'] or 0:5.2f} "
              f"{'PASS' if r['pass'] else 'FAIL ' + '; '.join(r['reasons'])}", flush=True)
    print(f"  {server.name:<22} SLO rate: {sw['best_rate']} req/s (repeats {sw['repeat_passes']}/{sw['repeats_run']})",
          flush=True)


def markdown(results: list[dict], clients: list[int]) -> str:
    head = "| server | " + " | ".join(f"{n} cl." for n in clients) + " | max req/s | SLO rate req/s |"
    lines = [head, "|" + "---|" * (len(clients) + 3)]
    for r in results:
        tp = {c["clients"]: c["throughput_rps"] for c in r["closed"]}
        best = max(tp.values()) if tp else 0.0
        slo = r["sweep"]["best_rate"] if r["sweep"] else None
        reps = f" ({r['sweep']['repeat_passes']}/{r['sweep']['repeats_run']} repeats)" if r["sweep"] else ""
        lines.append(f"| {r['server']} | " + " | ".join(f"{tp.get(n, 0):.0f}" for n in clients)
                     + f" | {best:.0f} | {'-' if slo is None else f'{slo:.0f}'}{reps} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="JSONL corpus (the dev corpus)")
    p.add_argument("--servers", default="openhood-numpy,openhood-onnxruntime,naive-numpy,naive-onnxruntime")
    p.add_argument("--clients", default="1,2,4,8,16,32,64")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--max-chars", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--serve-args", default="", help="extra `openhood serve` flags (batching knobs)")
    p.add_argument("--port", type=int, default=8190)
    p.add_argument("--out", help="write all results as JSON here")
    args = p.parse_args()
    args.clients = [int(x) for x in args.clients.split(",")]
    # All servers run at once (idle ones cost next to nothing) and the client counts are
    # interleaved across them, so a change in the machine's background load hits every server
    # alike instead of whichever happened to be measured at that moment.
    servers = [Server(name.strip(), args.port + i, args) for i, name in enumerate(args.servers.split(","))]
    try:
        for server in servers:
            wait_ready(server.url, server.proc)
        for n in args.clients:
            for server in servers:
                closed_run(server, n, args)
        if not args.no_sweep:
            for server in servers:
                sweep_run(server, args)
    finally:
        for server in servers:
            server.stop()
    results = [server.out for server in servers]
    print("\n" + markdown(results, args.clients))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
