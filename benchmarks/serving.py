"""Serving comparison: openhood vs the naive baseline per backend, with `openhood loadtest`;
prints every ratio of issue 12's "Measured" list with its spread over the repeats.

1. engine-only ceiling per backend (``benchmarks/batching.py`` on the same corpus and cut);
2. all servers started on loopback ports and waited for (/health/ready), then closed loop at
   each ``--clients`` count, ``--repeats`` times with seeds seed, seed+1, … (each round runs
   every client count on every server before the next, so background load hits all alike);
3. ``--noisy``: per listed openhood server, closed loop at ``--noisy-clients`` quiet and then
   with a busy-loop process pinned to one core (``BusyLoop``), ``--repeats`` pairs;
4. per swept server, an open-loop ``--sweep`` for the highest rate meeting the SLO (no errors,
   P99 ≤ 3 × P50 in every token-length bucket with ≥ 500 samples): every rate judged on
   ``--repeats`` runs of ≥ ``--sweep-requests`` requests, stepped then bisected;
5. ``--slo-fractions 0.5,0.7``: every server at the same open-loop Poisson rates, those fractions
   of the first server's closed-loop maximum (the best of its ``--clients`` points), for
   ``--slo-duration`` s each, and the verdict per length bucket (P99 ≤ 3 × P50 in every bucket
   with ≥ ``--slo-min-samples`` samples, no errors); ``--model-json`` (``benchmarks/slo_model.py
   --json``) puts the virtual-time model's prediction beside each measured row.
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
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def server_command(name: str, port: int, serve_args: list[str], int8_model: str | None = None) -> list[str]:
    """``openhood-<backend>[@t<N>][+flag...]``, ``naive-<backend>[@t<N>]`` or ``naiveserial-<backend>``.

    ``<backend>``: numpy, onnxruntime, or int8 (ONNX Runtime on the ``--int8-model`` folder made
    by ``openhood quantize``). ``@tN`` sets the engine's intra-op threads (default: openhood's own
    layout; all cores for the naive server). ``+flag`` adds ``--flag`` to ``openhood serve``
    (``openhood-numpy+no-preempt``: today's policy beside the preemptive default).
    """
    name, *flags = name.split("+")
    serve_args = [*serve_args, *(f"--{f}" for f in flags)]
    base, _, threads = name.partition("@t")
    kind, backend = base.split("-", 1)
    if backend == "int8":
        if not int8_model:
            raise SystemExit(f"{name} needs --int8-model DIR (made by `openhood quantize`)")
        engine = ["--backend", "onnxruntime", "--precision", "int8"]
    else:
        engine = ["--backend", backend]
    if kind == "openhood":
        head = [str(BIN / "openhood"), "serve"] + (["--threads", threads] if threads else [])
        model = ["--model", int8_model] if backend == "int8" and int8_model else []
        return [
            *head,
            *engine,
            *model,
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--grace-period",
            "2",
            *serve_args,
        ]
    if kind in ("naive", "naiveserial"):
        if backend == "int8":
            raise SystemExit("the naive server runs fp32 only")
        cmd = [sys.executable, str(ROOT / "benchmarks" / "naive_server.py"), *engine, "--port", str(port)]
        if threads:
            cmd += ["--threads", threads]
        return cmd + (["--serial"] if kind == "naiveserial" else [])
    raise SystemExit(
        f"unknown server {name!r} (openhood-<backend>, naive-<backend>, naiveserial-<backend>, optionally @t<threads>)"
    )


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 600.0) -> None:
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


def loadtest(url: str, args, extra: list[str], seed: int) -> tuple[str, dict]:
    cmd = [
        str(BIN / "openhood"),
        "loadtest",
        url,
        "--corpus",
        args.corpus,
        "--max-chars",
        str(args.max_chars),
        "--duration",
        str(args.duration),
        "--warmup",
        str(args.warmup),
        "--seed",
        str(seed),
        "--wait-ready",
        "0",
        "--json",
        "--quiet",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    shown = "openhood loadtest " + " ".join(shlex.quote(c) for c in cmd[2:])
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"{shown} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return shown, json.loads(proc.stdout)


class Server:
    """One server under test, started on a loopback port with its output in a log file."""

    def __init__(self, name: str, port: int, args):
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        cmd = server_command(
            name,
            port,
            shlex.split(args.serve_args) if name.startswith("openhood") else [],
            getattr(args, "int8_model", None),
        )
        # The server's output goes to a file: an unread pipe would fill up and block its logging.
        self.log_path = Path(tempfile.gettempdir()) / f"openhood-bench-{name}-{port}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        print(f"== {name}: {' '.join(cmd)}  (log: {self.log_path})", flush=True)
        self.out = {"server": name, "server_command": " ".join(cmd), "closed": [], "sweep": None, "noisy": []}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def closed_run(server: Server, n: int, args, seed: int, label: str = "closed") -> dict:
    # A 10 s read timeout: closed loop measures capacity, and 64 clients on a slow server
    # legitimately wait longer than the SLO's 3 x budget default.
    with CpuSampler(server.proc.pid) as cpu:
        shown, s = loadtest(server.url, args, ["--concurrency", str(n), "--timeout", "10"], seed)
    # The server's CPU during the client's run (its warm-up included, like client_cpu_cores):
    # with the client's, where the cores went.
    server_cores = cpu.cores_between(*s["window_unix"])
    row = {
        "clients": n,
        "seed": seed,
        "throughput_rps": s["throughput_rps"],
        "p50": s["latency_ms"]["p50"],
        "p99": s["latency_ms"]["p99"],
        "errors": s["error_count"],
        "client_cpu_cores": s.get("client_cpu_cores"),
        "server_cpu_cores": round(server_cores, 3),
        "command": shown,
    }
    print(
        f"  {server.name:<22} {label} x{n:<3} seed {seed} {row['throughput_rps']:7.1f} req/s  "
        f"P50 {row['p50'] or 0:7.1f} ms  P99 {row['p99'] or 0:7.1f} ms  errors {row['errors']}  "
        f"client CPU {row['client_cpu_cores'] or 0:.2f} cores  server CPU {server_cores:.2f} cores",
        flush=True,
    )
    return row


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its threads so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """A process's CPU seconds sampled every ``period`` s on a thread (wall-clock stamped), so the
    cores it used within any sub-window (a load test's measured run) can be read afterwards."""

    def __init__(self, pid: int, period: float = 0.1):
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, float]] = []  # (time.time(), CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                self.samples.append((time.time(), process_cpu_s(self.pid)))
            except (FileNotFoundError, ProcessLookupError):
                return
            if self._stop.wait(self.period):
                return

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cores_between(self, start: float, end: float) -> float:
        """CPU seconds per wall second over [start, end], from the samples nearest inside it."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return 0.0
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def sweep_run(server: Server, args) -> None:
    """Bisection for the highest open-loop rate meeting the SLO, every rate judged on ``--repeats``
    runs (a majority must pass) of at least ``--sweep-requests`` requests each; it starts at
    ``--sweep-start`` x the best closed-loop throughput and steps x1.25."""
    best = max((r["throughput_rps"] for r in server.out["closed"]), default=20.0)
    start = max(1.0, round(args.sweep_start * best, 1))
    shown, res = loadtest(
        server.url,
        args,
        [
            "--sweep",
            "--sweep-start",
            str(start),
            "--sweep-factor",
            "1.25",
            "--sweep-max",
            str(round(1.2 * best, 1)),
            "--sweep-bisect",
            str(args.sweep_bisect),
            "--sweep-repeats",
            str(args.repeats),
            "--sweep-requests",
            str(args.sweep_requests),
        ],
        args.seed,
    )
    sw = res["sweep"]
    server.out["sweep"] = {
        **{
            k: sw[k]
            for k in (
                "best_rate",
                "first_failing_rate",
                "repeat_passes",
                "repeats_run",
                "p99_spread_at_best_ms",
                "worst_bucket_ratio_spread_at_best",
                "rates",
                "runs",
            )
        },
        "command": shown,
    }
    for r in sw["runs"]:
        print(
            f"  {server.name:<22} sweep {r['phase']:>6} {r['rate']:7.1f} req/s seed {r['seed']} -> "
            f"{r['throughput_rps']:7.1f} req/s P99 {r['p99'] or 0:7.1f} ms worst-bucket "
            f"{r['worst_bucket_ratio'] or 0:5.2f} (checked {','.join(r.get('buckets_checked', []))}) "
            f"{'PASS' if r['pass'] else 'FAIL ' + '; '.join(r['reasons'])}",
            flush=True,
        )
    print(
        f"  {server.name:<22} SLO rate: {sw['best_rate']} req/s (runs at that rate passing: "
        f"{sw['repeat_passes']}/{sw['repeats_run']})",
        flush=True,
    )


class BusyLoop:
    """A foreign process spinning on one core (the last one this process may use), like a
    neighbour pod without a CPU limit; started and stopped around each measurement."""

    def __init__(self) -> None:
        self.core = max(os.sched_getaffinity(0))
        code = f"import os\nos.sched_setaffinity(0, {{{self.core}}})\nwhile True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.5)  # let it take its core

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def slo_runs(servers: list[Server], args) -> list[dict]:
    """Every server at ``--slo-fractions`` of the first server's closed-loop maximum, open loop."""
    from openhood.scheduler.policy import TAIL_RATIO

    anchor = servers[0]
    best = max((r["throughput_rps"] for r in anchor.out["closed"]), default=0.0)
    if not best:
        raise SystemExit(f"--slo-fractions needs closed-loop points of {anchor.name} (--clients)")
    rows = []
    for fraction in args.slo_fractions:
        rate = round(fraction * best, 1)
        for server in servers:
            extra = ["--rate", str(rate), "--duration", str(args.slo_duration)]
            shown, s = loadtest(server.url, args, extra, args.seed)
            checked = [b for b in s["buckets"] if b["count"] >= args.slo_min_samples]
            failing = [b["bucket"] for b in checked if b["ratio"] is not None and b["ratio"] > TAIL_RATIO]
            row = {
                "server": server.name,
                "fraction": fraction,
                "rate": rate,
                "anchor_max_rps": best,
                "throughput_rps": s["throughput_rps"],
                "errors": s["error_count"],
                "buckets": {b["bucket"]: (b["p50"], b["p99"], b["count"]) for b in s["buckets"] if b["count"]},
                "checked": [b["bucket"] for b in checked],
                "pass": not failing and not s["error_count"] and bool(checked),
                "command": shown,
            }
            server.out.setdefault("slo", []).append(row)
            rows.append(row)
            cells = ", ".join(
                f"{k} {p50:.0f}/{p99:.0f} ms ({p99 / p50:.2f}, n={n}{'' if n >= args.slo_min_samples else ', unchecked'})"
                for k, (p50, p99, n) in row["buckets"].items()
            )
            print(
                f"  {server.name:<26} {fraction:.2f}x {best:.1f} = {rate:.1f} req/s -> {s['throughput_rps']:.1f} req/s, "
                f"errors {s['error_count']}: {cells} -> {'PASS' if row['pass'] else 'FAIL'}",
                flush=True,
            )
    return rows


def slo_table(rows: list[dict], model: dict, model_map: dict[str, str], min_samples: int) -> str:
    """Markdown: per server and fraction, P99/P50 per bucket (measured), the verdict, and the
    model's worst-bucket ratio per seed for the same policy where ``model_map`` names it."""
    labels = sorted({k for r in rows for k in r["buckets"]}, key=lambda k: int(k.split("-")[0].rstrip("+")))
    lines = [
        f"| server | × max (req/s) | errors | {' | '.join(labels)} | verdict (n ≥ {min_samples}) | model worst P99/P50 |",
        "|---|---:|---:|" + "---|" * len(labels) + "---|---|",
    ]
    for r in rows:
        cells = []
        for k in labels:
            if k not in r["buckets"]:
                cells.append("-")
                continue
            p50, p99, n = r["buckets"][k]
            mark = "" if n >= min_samples else "*"
            cells.append(f"{p99 / p50:.2f}{mark} ({p50:.0f}/{p99:.0f}, n={n})")
        predicted = model.get(model_map.get(r["server"], ""), {}).get(f"{r['fraction']:.2f}")
        shown = " / ".join(f"{x:.2f}" for x in predicted) if predicted else "-"
        lines.append(
            f"| {r['server']} | {r['fraction']:.2f} ({r['rate']:.1f}) | {r['errors']} | {' | '.join(cells)} | "
            f"{'pass' if r['pass'] else 'fail'} | {shown} |"
        )
    return "\n".join(lines) + f"\n(* fewer than {min_samples} samples: not judged)"


def noisy_runs(server: Server, args) -> None:
    """Closed loop at ``--noisy-clients``, quiet then with the busy loop, ``--repeats`` times."""
    for rep in range(args.repeats):
        seed = args.seed + rep
        quiet = closed_run(server, args.noisy_clients, args, seed, "quiet")
        busy_loop = BusyLoop()
        try:
            busy = closed_run(server, args.noisy_clients, args, seed, f"busy(core {busy_loop.core})")
        finally:
            busy_loop.stop()
        server.out["noisy"].append({"quiet": quiet, "busy": busy})


def engine_ceiling(args) -> dict[str, float]:
    """Engine-only sentences/s per backend (``benchmarks/batching.py``: same corpus and cut, length-
    sorted batches, best of the layouts and budgets): what the cores can do without HTTP."""
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "batching.py"),
        "--corpus",
        args.corpus,
        "--max-chars",
        str(args.max_chars),
        "--texts",
        str(args.ceiling_texts),
        "--budgets",
        "1,256,512,1024",
        "--rounds",
        str(args.repeats),
        "--backends",
        *args.ceiling_backends,
    ]
    print("== engine ceiling: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=True).stdout
    best: dict[str, float] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ("numpy", "onnxruntime"):
            best[cells[0]] = max(best.get(cells[0], 0.0), float(cells[4]))
    print(out, flush=True)
    return best


def spread(values: list[float]) -> str:
    """``median (min-max, n=K)``."""
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def by_clients(server: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for row in server["closed"]:
        out.setdefault(row["clients"], []).append(row)
    return out


def median_tp(rows: list[dict]) -> float:
    return statistics.median(r["throughput_rps"] for r in rows)


def ratios(results: list[dict], ceiling: dict[str, float]) -> list[str]:
    """Every figure of issue 12's "Measured" list, each with its spread over the repeats."""
    named = {r["server"]: r for r in results}
    lines = []
    for oh in (r for r in results if r["server"].startswith("openhood-")):
        backend = oh["server"].split("-", 1)[1].split("@")[0]
        naive = named.get(f"naive-{backend}")
        per = by_clients(oh)
        if naive and 1 in per and 1 in by_clients(naive):
            p = [
                a["p50"] / b["p50"] for a, b in zip(per[1], by_clients(naive)[1], strict=False) if a["p50"] and b["p50"]
            ]
            lines.append(f"{oh['server']}: P50 at 1 client / naive-{backend}'s: {spread(p)}  (goal <= 1.05)")
        best_n = max(per, key=lambda n: median_tp(per[n])) if per else None
        if best_n is not None:
            best = median_tp(per[best_n])
            if backend in ceiling:
                served = [r["throughput_rps"] / ceiling[backend] for r in per[best_n]]
                lines.append(
                    f"{oh['server']}: served max ({best_n} clients) / engine-only ceiling "
                    f"{ceiling[backend]:.1f}/s: {spread(served)}  (goal >= 0.9)"
                )
                # The load generator runs on the same cores; the ceiling had them all.
                client = [r["client_cpu_cores"] for r in per[best_n] if r.get("client_cpu_cores") is not None]
                cores = len(os.sched_getaffinity(0))
                if client:
                    left = [
                        r["throughput_rps"] / (ceiling[backend] * (cores - r["client_cpu_cores"]) / cores)
                        for r in per[best_n]
                        if r.get("client_cpu_cores") is not None
                    ]
                    lines.append(
                        f"{oh['server']}: the load generator used {spread(client)} of {cores} cores at that point; "
                        f"served max / the ceiling scaled to the cores left: {spread(left)}"
                    )
                server_cores = [r["server_cpu_cores"] for r in per[best_n] if r.get("server_cpu_cores")]
                if server_cores:
                    # Throughput per core the server really had, against the ceiling's per core: how
                    # efficient the served path is, whatever else the machine was doing.
                    per_core = [
                        (r["throughput_rps"] / r["server_cpu_cores"]) / (ceiling[backend] / cores)
                        for r in per[best_n]
                        if r.get("server_cpu_cores")
                    ]
                    lines.append(
                        f"{oh['server']}: the server process used {spread(server_cores)} cores there; requests per "
                        f"server core / the ceiling's per core: {spread(per_core)}"
                    )
            held = {n: [r["throughput_rps"] / best for r in rows] for n, rows in per.items() if n >= 2}
            if held:
                worst_n = min(held, key=lambda n: statistics.median(held[n]))
                lines.append(
                    f"{oh['server']}: throughput at 2-64 clients / its best, worst point {worst_n} clients: "
                    f"{spread(held[worst_n])}  (goal >= 0.9)"
                )
            sw = oh.get("sweep")
            if sw and sw["best_rate"]:
                p99 = sw["p99_spread_at_best_ms"]
                worst = sw["worst_bucket_ratio_spread_at_best"]
                lines.append(
                    f"{oh['server']}: SLO rate {sw['best_rate']:.1f} req/s / closed-loop max {best:.1f}: "
                    f"{sw['best_rate'] / best:.2f} (rate passed {sw['repeat_passes']}/{sw['repeats_run']} runs; "
                    f"P99 {p99[0]:.0f}-{p99[1]:.0f} ms; worst bucket P99/P50 "
                    f"{'-' if worst is None else f'{worst[0]:.2f}-{worst[1]:.2f}'})  (goal >= 0.7)"
                )
                nsw = naive.get("sweep") if naive else None
                if nsw and nsw["best_rate"]:
                    lines.append(
                        f"{oh['server']}: SLO rate / naive-{backend}'s {nsw['best_rate']:.1f}: "
                        f"{sw['best_rate'] / nsw['best_rate']:.2f}  (goal >= 2)"
                    )
                elif nsw:
                    lines.append(f"{oh['server']}: naive-{backend} met the SLO at no rate tried")
            elif sw:
                lines.append(f"{oh['server']}: no rate tried met the SLO")
        if oh["noisy"]:
            busy = [n["busy"]["throughput_rps"] / n["quiet"]["throughput_rps"] for n in oh["noisy"]]
            errors = sum(n["busy"]["errors"] + n["quiet"]["errors"] for n in oh["noisy"])
            lines.append(
                f"{oh['server']}: throughput with one core busy / quiet: {spread(busy)}, errors {errors}  "
                "(goal >= 0.4, no errors)"
            )
    return lines


def markdown(results: list[dict], clients: list[int]) -> str:
    head = "| server | " + " | ".join(f"{n} cl. req/s" for n in clients) + " | P50 1 cl. ms | SLO rate req/s |"
    lines = [head, "|" + "---|" * (len(clients) + 3)]
    for r in results:
        per = by_clients(r)
        cells = []
        for n in clients:
            tps = [x["throughput_rps"] for x in per.get(n, [])]
            cells.append(f"{statistics.median(tps):.1f} ({min(tps):.0f}-{max(tps):.0f})" if tps else "-")
        p50 = [x["p50"] for x in per.get(1, []) if x["p50"]]
        sw = r["sweep"]
        slo = "-" if not sw else ("none" if sw["best_rate"] is None else f"{sw['best_rate']:.1f}")
        lines.append(f"| {r['server']} | " + " | ".join(cells) + f" | {spread(p50) if p50 else '-'} | {slo} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="JSONL corpus (the dev corpus)")
    p.add_argument("--servers", default="openhood-numpy,openhood-onnxruntime,naive-numpy,naive-onnxruntime")
    p.add_argument("--clients", default="1,2,8,64")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--max-chars", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs (seeds seed, seed+1, ...) per closed-loop point, sweep "
        "rate and noisy-neighbour pair; the engine ceiling takes the best of as many rounds",
    )
    p.add_argument("--sweep-servers", default=None, help="comma list of servers to sweep (default: all; '' = none)")
    p.add_argument(
        "--sweep-requests",
        type=int,
        default=1500,
        help="each sweep run lasts at least this many requests (about 500 in each of the two main buckets)",
    )
    p.add_argument("--sweep-start", type=float, default=0.6, help="first sweep rate, x the best closed-loop throughput")
    p.add_argument("--sweep-bisect", type=int, default=2)
    p.add_argument("--noisy", default="", help="comma list of openhood servers to measure with one core busy")
    p.add_argument("--noisy-clients", type=int, default=8)
    p.add_argument("--int8-model", help="folder made by `openhood quantize` (for *-int8 servers)")
    p.add_argument("--ceiling-backends", nargs="*", default=["onnxruntime", "numpy"])
    p.add_argument("--ceiling-texts", type=int, default=400)
    p.add_argument("--serve-args", default="", help="extra `openhood serve` flags (batching knobs)")
    p.add_argument("--port", type=int, default=8190)
    p.add_argument("--out", help="write all results as JSON here")
    p.add_argument(
        "--slo-fractions",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[],
        help="open-loop rates as fractions of the first server's closed-loop max, every server (e.g. 0.5,0.7)",
    )
    p.add_argument("--slo-duration", type=float, default=60.0, help="seconds per --slo-fractions run")
    p.add_argument("--slo-min-samples", type=int, default=300, help="a bucket is judged from this many samples")
    p.add_argument("--model-json", help="benchmarks/slo_model.py --json output: predictions beside the measurement")
    p.add_argument(
        "--model-map",
        default="",
        help="server=variant pairs naming the model's variant of each server (e.g. openhood-numpy=served)",
    )
    args = p.parse_args()
    args.clients = [int(x) for x in args.clients.split(",")]
    closed_names = [n.strip() for n in args.servers.split(",") if n.strip()]
    sweep_names = closed_names if args.sweep_servers is None else [n for n in args.sweep_servers.split(",") if n]
    noisy_names = [n for n in args.noisy.split(",") if n]
    names = closed_names + [n for n in noisy_names if n not in closed_names]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    ceiling = engine_ceiling(args) if args.ceiling_backends else {}
    # All servers run at once (idle ones cost next to nothing) and the client counts are
    # interleaved across them, so a change in the machine's background load hits every server
    # alike instead of whichever happened to be measured at that moment.
    # A timeout's SIGTERM must still stop the servers (the finally below), not orphan them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    servers = [Server(name, args.port + i, args) for i, name in enumerate(names)]
    try:
        for server in servers:
            wait_ready(server.url, server.proc)
        for rep in range(args.repeats):
            for n in args.clients:
                for server in (s for s in servers if s.name in closed_names):
                    server.out["closed"].append(closed_run(server, n, args, args.seed + rep))
        for server in servers:
            if server.name in noisy_names:
                noisy_runs(server, args)
        report(servers, args, ceiling)  # before the sweeps, the longest part
        if args.slo_fractions:
            rows = slo_runs([s for s in servers if s.name in closed_names], args)
            model = json.loads(Path(args.model_json).read_text()) if args.model_json else {}
            pairs = dict(kv.split("=", 1) for kv in args.model_map.split(",") if kv)
            print("\n" + slo_table(rows, model, pairs, args.slo_min_samples), flush=True)
            report(servers, args, ceiling)  # --out gains the rows
        for server in servers:
            if server.name in sweep_names:
                sweep_run(server, args)
                report(servers, args, ceiling)
    finally:
        for server in servers:
            server.stop()


def report(servers: list[Server], args, ceiling: dict[str, float]) -> None:
    results = [server.out for server in servers]
    print(f"\nload average now: {os.getloadavg()}")
    print("\n" + markdown(results, args.clients))
    print("\nRatios (median (min-max, n=runs) over the repeats):", flush=True)
    for line in ratios(results, ceiling):
        print("- " + line, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"ceiling": ceiling, "servers": results}, indent=2))


if __name__ == "__main__":
    main()
