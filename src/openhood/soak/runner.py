"""Drive the traffic mix for N requests or T seconds while sampling ``/debug/memory``.

Client threads send requests from the shared ``TrafficMix`` (one lock around drawing, so the
sequence stays seeded); the calling thread samples the server's memory every
``sample_every_s`` seconds, including once before the first request (the baseline the first
diff is taken against) and once after the last. Every client has explicit timeouts and a
bounded pool; disconnects use their own tiny-timeout client so they never poison the main pool.
The trade-off: threads, not asyncio — a soak needs steady pressure for a long time, not the
highest rate, and the sampler must keep its cadence whatever the clients do.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from openhood.soak.traffic import TrafficMix

DISCONNECT_AFTER_S = 0.005  # give up on the response this soon: the server sees the client leave
# A sample (tracemalloc snapshot + gc walk) can take long on a loaded machine; one that takes
# longer than this is counted as missed and the soak goes on (a long soak must not die of it).
SAMPLE_TIMEOUT_S = 120.0


class SoakError(RuntimeError):
    """The server cannot be soaked (not ready, or no /debug/memory)."""


@dataclass
class SoakConfig:
    base_url: str
    requests: int | None = None
    seconds: float | None = None
    concurrency: int = 4
    sample_every_s: float = 1.0
    timeout_s: float = 60.0
    api_key: str | None = None
    seed: int = 0
    top: int = 50
    wait_ready_s: float = 60.0


@dataclass
class SoakRun:
    samples: list[dict] = field(default_factory=list)  # {"t", "requests", "memory": /debug/memory body}
    outcomes: Counter = field(default_factory=Counter)  # "kind status" → count
    unexpected: int = 0  # a valid request that did not get 200
    missed_samples: int = 0  # samples that timed out (the next diff then spans two intervals)
    stopped_early: bool = False  # Ctrl-C / SIGINT: requests stopped, the report still written
    models: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0
    sent: int = 0


def _client(cfg: SoakConfig, pool: int, read_timeout: float) -> httpx.Client:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    return httpx.Client(
        base_url=cfg.base_url,
        headers=headers,
        timeout=httpx.Timeout(read_timeout, connect=3.05, write=10.0),
        limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
    )


def wait_ready(client: httpx.Client, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if client.get("/health/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SoakError(f"server at {client.base_url} not ready within {seconds:g} s")
        time.sleep(0.3)


def sample_memory(client: httpx.Client, top: int) -> dict:
    r = client.get("/debug/memory", params={"top": top})
    if r.status_code == 404:
        raise SoakError("the server has no /debug/memory: start it with `openhood serve --debug-endpoints`")
    if r.status_code == 401:
        raise SoakError("/debug/memory refused the request: pass the server's --api-key")
    r.raise_for_status()
    return r.json()


def take_sample(run: SoakRun, control: httpx.Client, top: int, start: float, progress=None) -> None:
    try:
        memory = sample_memory(control, top)
    except httpx.TimeoutException:
        run.missed_samples += 1
        return
    run.samples.append({"t": time.monotonic() - start, "requests": run.sent, "memory": memory})
    if progress is not None:
        progress(run)


def run_soak(cfg: SoakConfig, progress=None) -> SoakRun:
    if cfg.requests is None and cfg.seconds is None:
        raise ValueError("give --requests N or --seconds T (or both)")
    run = SoakRun()
    with (
        _client(cfg, 2, max(cfg.timeout_s, SAMPLE_TIMEOUT_S)) as control,
        _client(cfg, cfg.concurrency, cfg.timeout_s) as client,
        _client(cfg, 2, DISCONNECT_AFTER_S) as quitter,
    ):
        wait_ready(control, cfg.wait_ready_s)
        run.models = control.get("/v1/models").raise_for_status().json()["data"]
        mix = TrafficMix(run.models, seed=cfg.seed)
        lock = threading.Lock()
        stop = threading.Event()
        start = time.monotonic()
        run.samples.append({"t": 0.0, "requests": 0, "memory": sample_memory(control, cfg.top)})

        def draw():
            with lock:
                if stop.is_set() or (cfg.requests is not None and run.sent >= cfg.requests):
                    return None
                if cfg.seconds is not None and time.monotonic() - start >= cfg.seconds:
                    return None
                run.sent += 1
                return mix.next()

        def worker():
            while (req := draw()) is not None:
                c = quitter if req.disconnect else client
                try:
                    status = str(c.post(req.path, content=req.body, headers=dict(req.headers)).status_code)
                except httpx.TimeoutException:
                    status = "gave_up" if req.disconnect else "timeout"
                except httpx.TransportError as exc:
                    status = type(exc).__name__
                with lock:
                    run.outcomes[f"{req.kind} {status}"] += 1
                    run.unexpected += int(req.expect_ok and status != "200")

        threads = [threading.Thread(target=worker, daemon=True, name=f"soak-{i}") for i in range(cfg.concurrency)]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                next_at = time.monotonic() + cfg.sample_every_s
                while time.monotonic() < next_at and any(t.is_alive() for t in threads):
                    time.sleep(0.05)
                take_sample(run, control, cfg.top, start, progress)
        except KeyboardInterrupt:
            # A soak stopped by hand still reports what it measured: let the requests in
            # flight finish, then take the closing sample.
            run.stopped_early = True
            stop.set()
            for t in threads:
                t.join(cfg.timeout_s + 5)
            take_sample(run, control, cfg.top, start, progress)
        finally:
            stop.set()
            for t in threads:
                t.join(cfg.timeout_s + 5)
        run.elapsed_s = time.monotonic() - start
    return run
