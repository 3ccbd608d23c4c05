"""Open-loop and closed-loop load generation over one asyncio event loop.

- **Open loop** (``rate``): arrival times are a seeded Poisson process computed *before* the
  run; a dispatcher starts each request at its scheduled time whether or not earlier ones have
  finished, like independent users. Latency is ``done - scheduled``: if the server (or our own
  connection pool, or a late event loop) delays a request, the delay is counted. Timing from the
  actual send instead would hide exactly the queueing we want to see ("coordinated omission").
- **Closed loop** (``concurrency``): N clients, each sends its next request as soon as the
  previous one returns. It measures maximum throughput; its latencies are not those of an
  open system (clients slow down with the server), which is why the SLO uses open loop.

Every request is bounded: per-request timeouts from the client plan, a hard total per request,
a hard cap on the number of requests, and a drain deadline after the dispatch window ends.
The trade-off of a single-threaded asyncio client: it shares the CPU with the server on a
small machine, so a saturated client adds its own delay; that delay is counted against the
server (we cannot tell them apart), and the progress line shows in-flight counts to spot it.
"""

from __future__ import annotations

import asyncio
import math
import re
import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from openhood.loadtest.client import ClientPlan, make_client
from openhood.loadtest.corpus import TextSampler
from openhood.loadtest.progress import ProgressLine

# OpenAI-style responses end with {"usage": {"prompt_tokens": N, ...}}; a regex on the raw bytes
# costs far less client CPU than parsing the 384 floats per text we do not need.
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')

MAX_REQUESTS_HARD = 1_000_000
# Open loop: connections per httpx pool (see run_async); a pool's per-request cost grows with its size.
OPEN_POOL_SHARD = 8
MAX_DURATION_HARD_S = 3600.0


@dataclass(frozen=True)
class RunConfig:
    url: str
    rate: float | None = None  # open loop: mean arrivals per second
    concurrency: int | None = None  # closed loop: number of clients
    duration: float = 15.0  # measured window, seconds
    warmup: float = 2.0  # sent but not measured, seconds
    batch: int = 1  # texts per request
    seed: int = 0
    max_requests: int = 200_000
    model: str | None = None  # the request's "model" field; omitted when None

    def __post_init__(self):
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of --rate (open loop) or --concurrency (closed loop)")
        if self.rate is not None and not (0 < self.rate <= 10_000):
            raise ValueError(f"--rate must be in (0, 10000] requests/s, got {self.rate}")
        if self.concurrency is not None and not (1 <= self.concurrency <= 1024):
            raise ValueError(f"--concurrency must be in [1, 1024], got {self.concurrency}")
        if not (0 < self.duration <= MAX_DURATION_HARD_S):
            raise ValueError(f"--duration must be in (0, {MAX_DURATION_HARD_S:g}] s, got {self.duration}")
        if not (0 <= self.warmup <= MAX_DURATION_HARD_S):
            raise ValueError(f"--warmup must be in [0, {MAX_DURATION_HARD_S:g}] s, got {self.warmup}")
        if not (1 <= self.batch <= 2048):
            raise ValueError(f"--batch must be in [1, 2048], got {self.batch}")
        if not (1 <= self.max_requests <= MAX_REQUESTS_HARD):
            raise ValueError(f"--max-requests must be in [1, {MAX_REQUESTS_HARD}], got {self.max_requests}")

    @property
    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"


@dataclass
class RunResult:
    """Per-request columns (measured requests only), times in seconds from the run start."""

    config: RunConfig
    plan: ClientPlan
    scheduled: np.ndarray  # (N,) float64, when the request was due
    sent: np.ndarray  # (N,) float64, when its headers went out on a connection
    done: np.ndarray  # (N,) float64, when the response (or error) came back
    status: list  # (N,) int HTTP status, or str error kind ("timeout", ...)
    n_texts: np.ndarray  # (N,) int32
    chars: np.ndarray  # (N,) int64, total characters of the request's texts
    tokens: np.ndarray  # (N,) int64, usage.prompt_tokens, -1 when the response had none
    warmup_requests: int = 0
    cancelled: int = 0  # still in flight at the drain deadline (also counted as errors)
    wall_s: float = 0.0
    # CPU seconds this client process used over the run (warm-up included): on a small box the
    # client shares the cores with the server under test, and this is how much it took.
    cpu_s: float = 0.0
    # Wall-clock (time.time()) start and end of the run, warm-up included: lets a caller match
    # what it sampled on the server side (benchmarks/serving.py: the server's CPU) to the run.
    window_unix: tuple[float, float] | None = None

    @property
    def latency(self) -> np.ndarray:
        return self.done - self.scheduled  # (N,) what the user waited, incl. any queueing

    @property
    def service(self) -> np.ndarray:
        return self.done - self.sent  # (N,) from the first byte on the wire; omits client-side waits

    @property
    def ok(self) -> np.ndarray:
        return np.array([s == 200 for s in self.status], dtype=bool)


class _Recorder:
    """Collects finished requests as tuples (cheap to append) and feeds the progress line."""

    def __init__(self, warmup: float, progress: ProgressLine | None):
        self.rows: list[tuple] = []
        self.warmup = warmup
        self.warmup_requests = 0
        self.progress = progress
        self.sent = 0

    def add(self, scheduled, sent, done, status, n, chars, tokens):
        if self.progress is not None:
            self.progress.observe(done - scheduled, status == 200)
        if scheduled < self.warmup:
            self.warmup_requests += 1
            return
        self.rows.append((scheduled, sent, done, status, n, chars, tokens))


def _encode_body(texts: list[str], model: str | None) -> bytes:
    import orjson

    body: dict[str, object] = {"input": texts}
    if model is not None:
        body["model"] = model
    return orjson.dumps(body)


def error_kind(exc: BaseException) -> str:
    """A failed request's outcome label (timeout, connection, …): the runner's and the chat load's."""
    import httpx

    for cls, name in (
        (httpx.PoolTimeout, "pool_timeout"),
        (httpx.ConnectTimeout, "connect_timeout"),
        (httpx.TimeoutException, "timeout"),
        (httpx.ConnectError, "connect_error"),
        (httpx.RemoteProtocolError, "protocol_error"),
        (httpx.ReadError, "read_error"),
        (httpx.WriteError, "write_error"),
        (TimeoutError, "timeout"),
    ):
        if isinstance(exc, cls):
            return name
    return type(exc).__name__


async def _one_request(
    client,
    url: str,
    texts: list[str],
    model: str | None,
    scheduled: float,
    t0: float,
    hard_timeout: float,
    rec: _Recorder,
) -> None:
    # Timestamps use perf_counter, not loop.time(): uvloop's clock is cached per loop iteration
    # at 1 ms resolution, which would round and under-state latencies.
    clock = time.perf_counter
    body = _encode_body(texts, model)
    chars = sum(len(t) for t in texts)
    # "sent" starts as the dispatch time and moves to when the request's headers actually go out
    # on a connection (httpcore's trace hook), i.e. after any wait for a pooled connection.
    sent = [clock()]

    async def trace(event: str, info: dict) -> None:
        if event == "http11.send_request_headers.started":
            sent[0] = clock()

    tokens = -1
    try:
        # A hard total on top of httpx's per-phase timeouts: a server trickling bytes resets
        # the read timeout on every chunk and could otherwise hold a request forever.
        async with asyncio.timeout(hard_timeout):
            resp = await client.post(
                url, content=body, headers={"content-type": "application/json"}, extensions={"trace": trace}
            )
        status = resp.status_code
        if status == 200:
            m = _PROMPT_TOKENS.search(resp.content)
            tokens = int(m.group(1)) if m else -1
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # every failure becomes a counted error kind, never a crash
        status = error_kind(exc)
    rec.add(scheduled, sent[0] - t0, clock() - t0, status, len(texts), chars, tokens)


def poisson_schedule(rate: float, horizon: float, seed: int, cap: int) -> np.ndarray:
    """Arrival times in [0, horizon) of a Poisson process: exponential gaps with mean 1/rate.

    >>> s = poisson_schedule(100.0, 10.0, seed=0, cap=10**6); 900 < len(s) < 1100
    True
    """
    rng = np.random.default_rng(seed)
    n_guess = int(rate * horizon + 6 * np.sqrt(rate * horizon) + 16)
    gaps = rng.exponential(1.0 / rate, size=n_guess)
    times = np.cumsum(gaps)
    while times[-1] < horizon:  # vanishingly rare: extend deterministically from the same rng
        more = np.cumsum(rng.exponential(1.0 / rate, size=n_guess)) + times[-1]
        times = np.concatenate([times, more])
    times = times[times < horizon]
    return times[:cap]


def _hard_timeout(plan: ClientPlan) -> float:
    return plan.pool_timeout + plan.connect_timeout + 2 * plan.read_timeout


async def _open_loop(
    clients: list, cfg: RunConfig, plan: ClientPlan, sampler: TextSampler, rec: _Recorder, t0: float
) -> int:
    assert cfg.rate is not None  # RunConfig.mode is "open" exactly when a rate is set
    schedule = poisson_schedule(cfg.rate, cfg.warmup + cfg.duration, cfg.seed, cfg.max_requests)
    hard = _hard_timeout(plan)
    tasks: set[asyncio.Task] = set()
    in_flight = [0] * len(clients)  # per pool: a request goes to the least busy one

    async def one(k: int, texts: list[str], due: float) -> None:
        try:
            await _one_request(clients[k], cfg.url, texts, cfg.model, due, t0, hard, rec)
        finally:
            in_flight[k] -= 1

    for due in schedule:
        # uvloop's timers have 1 ms resolution and can fire early: sleep again until the
        # scheduled instant has really passed, so no request is sent before its arrival time.
        while (delay := t0 + due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        # If we are late (a busy loop), we still start now and the lateness is counted in latency.
        k = min(range(len(clients)), key=in_flight.__getitem__)
        in_flight[k] += 1
        task = asyncio.create_task(one(k, sampler.draw(cfg.batch), float(due)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        rec.sent += 1
    return await drain_tasks(tasks, hard)


async def _closed_loop(
    clients: list, cfg: RunConfig, plan: ClientPlan, sampler: TextSampler, rec: _Recorder, t0: float
) -> int:
    end = cfg.warmup + cfg.duration
    hard = _hard_timeout(plan)

    async def one_client(client) -> None:
        while rec.sent < cfg.max_requests:
            now = time.perf_counter() - t0
            if now >= end:
                return
            rec.sent += 1
            await _one_request(client, cfg.url, sampler.draw(cfg.batch), cfg.model, now, t0, hard, rec)

    assert cfg.concurrency is not None  # RunConfig.mode is "closed" exactly when no rate is set
    tasks = {asyncio.create_task(one_client(clients[i % len(clients)])) for i in range(cfg.concurrency)}
    return await drain_tasks(tasks, end + hard)


async def drain_tasks(tasks: set, timeout: float) -> int:
    """Wait for in-flight work up to ``timeout``; cancel the rest and return how many."""
    if not tasks:
        return 0
    pending = set(tasks)
    _, still = await asyncio.wait(pending, timeout=timeout)
    for t in still:
        t.cancel()
    if still:
        await asyncio.wait(still)
    return len(still)


async def wait_ready(ready_url: str, timeout_s: float) -> None:
    """Poll GET /health/ready until 200 (404 = the server has no readiness route: go)."""
    import httpx

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(3.05, read=5.0), trust_env=False, limits=httpx.Limits(max_connections=1)
    ) as client:
        while True:
            try:
                r = await client.get(ready_url)
                if r.status_code in (200, 404):
                    return
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            if loop.time() >= deadline:
                raise ConnectionError(f"server not ready at {ready_url} after {timeout_s:g}s (last: {last})")
            await asyncio.sleep(0.2)


async def run_async(
    cfg: RunConfig, plan: ClientPlan, sampler: TextSampler, progress: ProgressLine | None = None, client=None
) -> RunResult:
    rec = _Recorder(cfg.warmup, progress)
    own_client = client is None
    if own_client and cfg.mode == "closed":
        # One 1-connection client per simulated user (the same pool bound in all: N
        # connections). A shared httpx pool of N connections scans all N on every request
        # (httpcore's _assign_requests_to_connections: expiry and idle checks per connection):
        # at 64 clients that was ~70% of this process's CPU, ~0.4 of the 2 cores it shares
        # with the server under test.
        clients = [make_client(replace(plan, max_connections=1)) for _ in range(cfg.concurrency or 1)]
    elif own_client:
        # Open loop: the plan's pool split into pools of at most OPEN_POOL_SHARD connections
        # (same total), each request to the one with the fewest in flight, for the same reason.
        # The difference from one pool: when every connection is busy, a request waits for its
        # own pool's next free one rather than the first one anywhere (only under overload).
        n = math.ceil(plan.max_connections / OPEN_POOL_SHARD)
        sizes = [plan.max_connections // n + (1 if i < plan.max_connections % n else 0) for i in range(n)]
        clients = [make_client(replace(plan, max_connections=size)) for size in sizes]
    else:
        clients = [client]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    started_unix = time.time()
    ticker = None
    if progress is not None:
        progress.start(cfg, lambda: (rec.sent, time.perf_counter() - t0))
        ticker = asyncio.create_task(progress.run())
    try:
        if cfg.mode == "open":
            cancelled = await _open_loop(clients, cfg, plan, sampler, rec, t0)
        else:
            cancelled = await _closed_loop(clients, cfg, plan, sampler, rec, t0)
    finally:
        if ticker is not None and progress is not None:
            ticker.cancel()
            progress.finish()
        if own_client:
            for c in clients:
                await c.aclose()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    rows = rec.rows
    cols = list(zip(*rows, strict=True)) if rows else [()] * 7
    return RunResult(
        config=cfg,
        plan=plan,
        scheduled=np.asarray(cols[0], dtype=np.float64),
        sent=np.asarray(cols[1], dtype=np.float64),
        done=np.asarray(cols[2], dtype=np.float64),
        status=list(cols[3]),
        n_texts=np.asarray(cols[4], dtype=np.int32),
        chars=np.asarray(cols[5], dtype=np.int64),
        tokens=np.asarray(cols[6], dtype=np.int64),
        warmup_requests=rec.warmup_requests,
        cancelled=cancelled,
        wall_s=wall,
        cpu_s=cpu,
        window_unix=(started_unix, started_unix + wall),
    )


def new_event_loop() -> asyncio.AbstractEventLoop:
    # uvloop (installed with uvicorn[standard]) lowers the client's own CPU cost per request,
    # which matters when client and server share two cores.
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run(
    cfg: RunConfig,
    plan: ClientPlan,
    sampler: TextSampler,
    progress: ProgressLine | None = None,
    wait_ready_s: float = 0.0,
    ready_url: str | None = None,
) -> RunResult:
    """Run one load test to completion (blocking); see ``run_async``."""
    loop = new_event_loop()
    try:
        if wait_ready_s > 0 and ready_url:
            loop.run_until_complete(wait_ready(ready_url, wait_ready_s))
        return loop.run_until_complete(run_async(cfg, plan, sampler, progress))
    finally:
        loop.close()


def default_progress(enabled: bool) -> ProgressLine | None:
    return ProgressLine(sys.stderr) if enabled else None
