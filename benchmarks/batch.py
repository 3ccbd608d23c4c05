"""``openhood batch`` throughput against its anchors, and its memory as the input grows.

Measured on the same dev-corpus texts, in one run:

1. **Engine anchor**: ``Embedder.embed`` on all texts at once (one global length sort, padded
   per batch), in this process, in two layouts (one engine with every core's thread, and one
   one-thread engine per core side by side), at batch sizes 16/32/64/128 (two interleaved
   rounds): the engine's own best batch throughput. Measured again after each CLI run; the
   best of all counts.
2. **openhood batch, local engine** (a subprocess, the anchor's best layout and batch size,
   default shard size), ``--cli-runs`` times alternating with the anchor in that configuration;
   the best of each side over the same number of runs is compared (the sweep's maximum, a best
   of 2 rounds x 8 configurations, is printed too: it carries the selection's upward bias): end
   to end, and without its fixed per-job cost (interpreter, imports, model load and warm-up,
   Parquet writer, exit: the wall time of the same command on a one-row input).
3. **The same job through the server**: ``openhood serve`` (its defaults) on 127.0.0.1, the
   texts sent as ``/v1/embeddings`` requests of 32 inputs by 4 concurrent clients.
4. **--engine ray**, one actor per core (``--threads 1``), on a private local Ray, with shards
   of ``texts / (4 x cores)`` rows so every actor has work: end to end and without Ray's
   start-up; the overhead against a local run with the same shards (whose output it must
   match byte for byte) is reported.
5. **Peak RSS** of ``openhood batch`` (``wait4``'s ``ru_maxrss``) on N and 10×N texts with
   ``--shard-rows 256``: memory follows the shard, not the input.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/batch.py \\
        --corpus /work/shared/data/dev_corpus.jsonl --texts 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "openhood.cli"]
SUMMARY = re.compile(r"(\d+) rows embedded.* in ([\d.]+) s \(([\d.]+) s")


def write_jsonl(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    return path


def layouts(cores: int) -> dict[str, tuple[int, int]]:
    """Engine layouts the anchor tries: name → (workers, threads per worker)."""
    out = {f"1 engine x {cores} threads": (1, cores)}
    if cores > 1:
        out[f"{cores} engines x 1 thread"] = (cores, 1)
    return out


def anchor(
    texts: list[str], batch_sizes: list[int], cores: int, rounds: int = 2, only: str | None = None
) -> dict[tuple[str, int], float]:
    """(layout, batch size) → best sentences/s of ``Embedder.embed`` over ``rounds`` (every
    layout, or ``only`` that one)."""
    from openhood import Embedder

    engines = {}
    for name, (workers, threads) in layouts(cores).items():
        if only is not None and name != only:
            continue
        engines[name] = Embedder.from_pretrained(None, threads=threads, workers=workers)
        engines[name].embed(texts[:64], batch_size=32)  # compile / warm the kernels
    out = {(name, b): 0.0 for name in engines for b in batch_sizes}
    for _ in range(rounds):  # layouts and sizes interleaved, best round counts: the machine is shared
        for b in batch_sizes:
            for name, emb in engines.items():
                t0 = time.perf_counter()
                emb.embed(texts, batch_size=b)
                out[name, b] = max(out[name, b], len(texts) / (time.perf_counter() - t0))
    for emb in engines.values():
        emb.close()
    return out


def run_cli(args: list[str], env=None) -> tuple[float, float, int]:
    """Run ``openhood batch``; (end-to-end s, start-up s, peak RSS bytes of the driver)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*CLI, "batch", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"openhood batch {' '.join(args)} failed: {out}")
    m = SUMMARY.search(out)
    return wall, float(m.group(3)), usage.ru_maxrss * 1024


async def _post_all(port: int, model: str, texts: list[str], per_request: int, clients: int) -> None:
    import httpx

    chunks = [texts[i : i + per_request] for i in range(0, len(texts), per_request)]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(120.0, connect=5.0), limits=limits
    ) as client:

        async def worker(mine):
            for chunk in mine:
                r = await client.post("/v1/embeddings", json={"input": chunk, "model": model})
                r.raise_for_status()

        await asyncio.gather(*(worker(chunks[i::clients]) for i in range(clients)))


def through_server(texts: list[str], port: int, per_request: int = 32, clients: int = 4) -> float:
    import httpx

    proc = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the server did not become ready")
            time.sleep(0.5)
        model = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][0]["id"]
        asyncio.run(_post_all(port, model, texts[:64], per_request, clients))  # warm up
        t0 = time.perf_counter()
        asyncio.run(_post_all(port, model, texts, per_request, clients))
        return len(texts) / (time.perf_counter() - t0)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="JSONL corpus (the dev corpus)")
    p.add_argument("--texts", type=int, default=2000, help="texts for the throughput runs")
    p.add_argument("--rss-texts", type=int, default=400, help="N for the RSS runs (N and 10 N)")
    p.add_argument("--batch-sizes", default="16,32,64,128")
    p.add_argument("--port", type=int, default=8191)
    p.add_argument(
        "--cli-runs",
        type=int,
        default=3,
        help="timed local CLI runs, each followed by an anchor run (best of each counts)",
    )
    p.add_argument("--skip", default="", help="comma list of: server, ray, rss")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    from openhood.corpus import read_texts
    from openhood.engine.kernels.cores import available_cores

    cores = available_cores()
    texts = read_texts(args.corpus, limit=max(args.texts, args.rss_texts * 10))
    run = texts[: args.texts]
    tmp = Path(tempfile.mkdtemp(prefix="openhood-batch-bench-"))
    src = write_jsonl(tmp / "in.jsonl", run)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    print(f"{len(run)} dev-corpus texts, {cores} cores", flush=True)

    first = anchor(run, sizes, cores)
    best_layout, best_b = max(first, key=first.get)
    workers, threads = layouts(cores)[best_layout]
    print(
        "engine anchor (sentences/s by layout and batch size):",
        {f"{name}, batch {b}": round(r, 1) for (name, b), r in first.items()},
        flush=True,
    )

    layout_args = ["--workers", str(workers), "--threads", str(threads)]
    local_args = ["--input", str(src), "--output", str(tmp / "local.parquet"), "--batch-size", str(best_b)]
    # The CLI is timed as often as the anchor's best configuration, alternating with it, and the
    # best of each side counts: a best-of-N anchor against fewer CLI runs would favour the anchor.
    # The sweep's maximum is not the anchor: it is the best of 2 rounds x every configuration, so
    # it is biased upward by the selection itself (reported beside the paired figure).
    # A job's fixed cost — interpreter, imports, model load and warm-up, the Parquet writer, exit —
    # measured as the wall time of the same command on a one-row input; "without start-up"
    # subtracts it (the model load the CLI reports is only part of it).
    one = write_jsonl(tmp / "one.jsonl", run[:1])
    fixed = min(
        run_cli(["--input", str(one), "--output", str(tmp / f"one{i}.parquet"), *layout_args])[0] for i in range(2)
    )
    print(f"fixed per-job cost (1-row job, best of 2): {fixed:.2f} s", flush=True)
    local_runs, again = [], []
    for i in range(args.cli_runs):
        wall, setup, _ = run_cli([*local_args, *layout_args, *(["--overwrite"] if i else [])])
        local_runs.append((len(run) / wall, len(run) / (wall - fixed)))
        print(
            f"openhood batch local ({best_layout}) run {i + 1}: {local_runs[-1][0]:.1f}/s end to end, "
            f"{local_runs[-1][1]:.1f}/s without the {fixed:.2f} s fixed cost (model load {setup:.1f} s)",
            flush=True,
        )
        again.append(anchor(run, [best_b], cores, rounds=1, only=best_layout)[best_layout, best_b])
        print(f"engine anchor again ({best_layout}, batch {best_b}): {again[-1]:.1f}/s", flush=True)
    local_e2e = max(r[0] for r in local_runs)
    local_steady = max(r[1] for r in local_runs)
    sweep_best = max(first.values())
    engine_best = max(again)  # the anchor in its best configuration, as many runs as the CLI
    pairs = [cli / a for (_, cli), a in zip(local_runs, again, strict=True)]
    print(
        f"engine best {engine_best:.1f}/s (sweep maximum {sweep_best:.1f}/s); openhood batch best "
        f"{local_steady:.1f}/s without start-up; per adjacent pair {', '.join(f'{r:.2f}x' for r in pairs)}",
        flush=True,
    )

    server = None
    if "server" not in skip:
        server = through_server(run, args.port)
        print(f"through the server: {server:.1f}/s", flush=True)

    ray_e2e = ray_steady = None
    # A shard is one actor's unit of work: several per actor so that every actor stays busy. The
    # local run it is compared with (and must match byte for byte) uses the same shards.
    ray_shards = max(1, -(-len(run) // (4 * cores)))
    if "ray" not in skip:
        shard_args = ["--input", str(src), "--batch-size", str(best_b), "--shard-rows", str(ray_shards)]
        wall, setup, _ = run_cli([*shard_args, "--output", str(tmp / "local-sharded.parquet"), *layout_args])
        sharded_e2e, sharded_steady = len(run) / wall, len(run) / (wall - setup)
        print(f"openhood batch local, --shard-rows {ray_shards}: {sharded_e2e:.1f}/s end to end", flush=True)
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        wall, setup, _ = run_cli(
            [
                *shard_args,
                "--output",
                str(tmp / "ray.parquet"),
                "--engine",
                "ray",
                "--ray-cpus",
                str(cores),
                "--concurrency",
                str(cores),
                "--threads",
                "1",
            ],
            env,
        )
        ray_e2e, ray_steady = len(run) / wall, len(run) / (wall - setup)
        same = (tmp / "ray.parquet").read_bytes() == (tmp / "local-sharded.parquet").read_bytes()
        print(
            f"--engine ray x{cores}: {ray_e2e:.1f}/s end to end, {ray_steady:.1f}/s without {setup:.1f} s Ray start-up; "
            f"output identical to local: {same}",
            flush=True,
        )

    rss = None
    if "rss" not in skip:
        rss = []
        for n in (args.rss_texts, args.rss_texts * 10):
            path = write_jsonl(tmp / f"rss{n}.jsonl", texts[:n])
            _, _, peak = run_cli(
                ["--input", str(path), "--output", str(tmp / f"rss{n}.parquet"), "--shard-rows", "256"]
            )
            rss.append((n, path.stat().st_size, peak))
            print(f"peak RSS on {n} texts ({path.stat().st_size / 1e6:.2f} MB): {peak / 2**20:.0f} MiB", flush=True)

    print()
    print("| run | sentences/s | ratio |")
    print("|---|---|---|")
    print(
        f"| engine's best (`Embedder.embed`, {best_layout}, batch {best_b}, in memory, best of {len(again)}) | "
        f"{engine_best:.1f} | 1.00x |"
    )
    print(
        f"| the sweep's maximum (best of 2 rounds x {len(first)} configurations: selection bias) | {sweep_best:.1f} | "
        f"{sweep_best / engine_best:.2f}x |"
    )
    print(
        f"| `openhood batch` local, end to end (best of {len(local_runs)}) | {local_e2e:.1f} | {local_e2e / engine_best:.2f}x |"
    )
    print(
        f"| `openhood batch` local, without its {fixed:.2f} s fixed per-job cost | {local_steady:.1f} | "
        f"{local_steady / engine_best:.2f}x (vs the sweep maximum {local_steady / sweep_best:.2f}x; adjacent pairs "
        f"{', '.join(f'{r:.2f}x' for r in pairs)}) |"
    )
    if server is not None:
        print(
            f"| through `openhood serve` (32 inputs/request, 4 clients) | {server:.1f} | {server / engine_best:.2f}x "
            f"(batch/server {local_steady / server:.2f}x) |"
        )
    if ray_e2e is not None:
        print(
            f"| `--engine ray`, {cores} actors x 1 thread, end to end | {ray_e2e:.1f} | {ray_e2e / engine_best:.2f}x "
            f"(overhead vs local with the same {ray_shards}-row shards {1 - ray_e2e / sharded_e2e:+.0%}) |"
        )
        print(
            f"| `--engine ray`, without Ray start-up | {ray_steady:.1f} | {ray_steady / engine_best:.2f}x "
            f"(overhead vs local {1 - ray_steady / sharded_steady:+.0%}) |"
        )
    if rss:
        (n1, b1, r1), (n2, b2, r2) = rss
        print(
            f"\npeak RSS: {n1} texts {r1 / 2**20:.0f} MiB, {n2} texts {r2 / 2**20:.0f} MiB: {r2 / r1:.2f}x for "
            f"{b2 / b1:.1f}x the input (--shard-rows 256)"
        )


if __name__ == "__main__":
    main()
