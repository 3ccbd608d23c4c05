"""What the browser console costs the server: the page's weight, and CPU per connected browser.

Starts ``openhood serve`` (the default MiniLM) on loopback and measures the server process's
CPU (user + system, from /proc via psutil) over alternating windows with no console stream open
and with ``--clients`` streams of ``GET /console/events`` open (each read as a browser would, one
event a tick): first on an idle server (the streams' own cost, with the least noise), then while
a steady open-loop ``openhood loadtest`` runs against it. The cost per browser is (CPU with
streams − CPU without) / clients, which includes the shared once-a-tick snapshot; the windows are
interleaved (off, on, off, …, off) so drifting background load hits both alike. Run it under
the benchmark lock:

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/console_cost.py

The absolute cores depend on the machine and its load; the ratio of a browser's cost to the
server's own CPU at that load, measured in the same run, is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from openhood.diskcache import cpu_model
from openhood.soak.launch import LaunchedServer
from openhood.soak.runner import wait_ready

ASSETS = ("/console", "/console/console.js", "/console/console.css")


class Streams:
    """``n`` console streams read on one background event loop; counts events and bytes."""

    def __init__(self, url: str, n: int):
        self.url, self.n = url, n
        self.events = 0
        self.bytes = 0
        self._stop: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _one(self, client: httpx.AsyncClient) -> None:
        async with client.stream("GET", self.url + "/console/events") as resp:
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    self.events += 1
                    self.bytes += len(line) + 2
                if self._stop is not None and self._stop.is_set():
                    return

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        limits = httpx.Limits(max_connections=self.n, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0), limits=limits) as client:
            tasks = [asyncio.ensure_future(self._one(client)) for _ in range(self.n)]
            await self._stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> Streams:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stop is None:
            time.sleep(0.01)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def cpu_cores(proc: psutil.Process, seconds: float) -> float:
    """The process's CPU over the next ``seconds``, in cores (CPU seconds per second)."""
    t0, c0 = time.monotonic(), sum(proc.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(proc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)


def measure(url: str, proc: psutil.Process, args: argparse.Namespace) -> float:
    """Interleaved windows without and with ``args.clients`` streams; prints them and returns
    the CPU per stream in cores."""
    off: list[float] = []
    on: list[float] = []
    events, nbytes, seconds = 0, 0, 0.0
    for i in range(2 * args.pairs + 1):
        if i % 2 == 0:
            off.append(cpu_cores(proc, args.window))
            print(f"window {i + 1}: no stream          server CPU {off[-1]:.3f} cores")
            continue
        with Streams(url, args.clients) as streams:
            time.sleep(2)  # every stream connected and past its first tick
            e0, b0, t0 = streams.events, streams.bytes, time.monotonic()
            on.append(cpu_cores(proc, args.window))
            events, nbytes = events + streams.events - e0, nbytes + streams.bytes - b0
            seconds += time.monotonic() - t0
        print(f"window {i + 1}: {args.clients} streams open   server CPU {on[-1]:.3f} cores")
    base, with_streams = statistics.mean(off), statistics.mean(on)
    per = (with_streams - base) / args.clients
    spread = (max(off) - min(off)) / args.clients
    print(f"server CPU without streams: {base:.3f} cores (windows {', '.join(f'{c:.3f}' for c in off)})")
    print(
        f"server CPU with {args.clients} streams: {with_streams:.3f} cores (windows {', '.join(f'{c:.3f}' for c in on)})"
    )
    print(
        f"per connected browser: {per * 1000:.1f} millicores (noise: the no-stream windows spread "
        f"{spread * 1000:.1f} millicores per browser); {per / base * 100:.2f}% of the server's CPU here"
    )
    print(f"each stream: {events / seconds / args.clients:.2f} events/s, {nbytes / max(events, 1):.0f} bytes per event")
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10, help="console streams open at once (default 10)")
    ap.add_argument("--rate", type=float, default=20.0, help="load test requests/s meanwhile (default 20)")
    ap.add_argument("--window", type=float, default=10.0, help="seconds per measuring window (default 10)")
    ap.add_argument("--pairs", type=int, default=3, help="with-streams windows, each between two without (default 3)")
    args = ap.parse_args()
    print(
        f"# console cost — CPU: {cpu_model()} ({psutil.cpu_count()} logical cores), Python {platform.python_version()}"
    )
    # its access log (one line per request, the same in every window) goes to a file
    serve_args = ["--log-level", "warning", "--workers", "1", "--threads", "1"]
    tmp = tempfile.TemporaryDirectory()
    server = LaunchedServer([], Path(tmp.name) / "server.log", serve_args, debug_endpoints=False)
    url = server.url
    load = None
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            wait_ready(client, 300)
        sizes = {path: httpx.get(url + path, timeout=10).content for path in ASSETS}
        raw = sum(len(b) for b in sizes.values())
        packed = sum(len(gzip.compress(b)) for b in sizes.values())
        for path, body in sizes.items():
            print(f"page asset {path}: {len(body)} bytes")
        print(f"page weight: {raw} bytes ({raw / 1024:.1f} KiB; {packed / 1024:.1f} KiB gzipped), no other request")
        proc = psutil.Process(server.proc.pid)
        idle = measure(url, proc, args)  # nothing else running: the streams' own cost, least noise
        duration = args.window * (2 * args.pairs + 1) + 4 * args.pairs + 10
        loadtest = ["loadtest", url, "--rate", str(args.rate), "--duration", str(duration), "--warmup", "2"]
        load = subprocess.Popen([sys.executable, "-m", "openhood.cli", *loadtest, "--quiet"], stdout=subprocess.DEVNULL)
        print(f"load: openhood {' '.join(loadtest)} --quiet")
        time.sleep(5)  # past the load test's warm-up
        loaded = measure(url, proc, args)
        print(f"summary: per browser {idle * 1000:.1f} millicores idle, {loaded * 1000:.1f} millicores under load")
    finally:
        if load is not None:
            load.terminate()
            load.wait(30)
        server.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
