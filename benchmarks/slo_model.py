"""What tail the batching policy itself allows on this machine: the SLO sweep in virtual time.

The real SLO sweep (``benchmarks/serving.py --sweep-servers``) mixes two things: the policy
(which batch a worker takes, when, on which engine) and its execution on a shared 2-core box
(the event loop, the GIL, the load generator, two engines' cache contention). It is also slow
and noisy: 1500 requests per rate and point, ~±1 in the tail ratio between repeats. This script
separates them. It runs openhood's own ``DynamicBatcher`` — its ``next_batch`` / ``batch_done``
steps, the server's default ``BatchPolicy`` and buckets, token budgets from the real start-up
calibration — on a virtual clock, against a model of the machine whose every cost was measured
a minute earlier on the real engine:

- an engine batch of B rows padded to T costs what the real engine took for it: batches of
  1-32 rows at 9 lengths are timed (best of 5) on the 1-thread engine and on the all-cores wide
  engine, and a batch in between is interpolated linearly in rows and in length;
- the cores are shared as in an ideal processor-sharing CPU: n runnable threads on k cores run
  at min(1, k / n) each, and two engine batches at once run ``interference`` times slower each
  (measured: two 1-thread engines side by side versus one alone, shared caches and memory);
- every request costs ``--loop-ms`` of CPU on the one event-loop thread (parsing, tokenizing,
  JSON; half before queueing, half after), the load generator holds ``--client-cores``, and
  ``--client-ms`` of latency outside the server (HTTP on loopback, the client) is added.

Requests are single texts drawn from the corpus like ``openhood loadtest`` draws them, with
Poisson arrivals; latency is bucketed by tokens with the load test's buckets and checked
against its SLO (``loadtest.stats.Slo``: every bucket with >= 500 samples; a rate passes when
most seeds do, as ``loadtest.sweep`` judges it). 8000 requests per run fill all four buckets
below 257 tokens; the real sweep's 1500 fill only 0-32 and 33-64, so the last column judges
those two alone, like the real sweep does. The closed-loop maximum (64 clients) is simulated
too, so each rate is also a fraction of the modelled capacity.

The trade-off: a model leaves out what it does not model — GIL hand-offs, OS scheduling delays,
page faults — so it is an upper bound on what the real server reaches with the same policy.
Where the model already misses the SLO at a rate, no implementation of that policy on this
machine will meet it there; where the model passes and the server fails, execution costs the
difference. ``--variant`` runs the same sweep with other policy knobs (e.g. no short lane, no
wide engine) to compare policies without the noise of a real run.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/slo_model.py \\
        --corpus /work/shared/data/dev_corpus.jsonl --backend onnxruntime \\
        --variant no-wide:wide=0 --variant no-lane:short_lane_tokens=0
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import numpy as np

GRID_T = (8, 16, 32, 48, 64, 96, 128, 192, 256)  # padded lengths of the timed batches
GRID_B = (1, 2, 4, 8, 16, 32)  # rows, while B x T <= GRID_TOKENS
GRID_TOKENS = 1024
CLOSED_CLIENTS = 64  # the closed-loop point whose throughput is "the maximum"
SHORT_BUCKETS = ("0-32", "33-64")  # the buckets a 1500-request sweep run fills to the SLO's 500 samples


# ---- the machine: measured batch costs, processor sharing -------------------------------------


@dataclass(frozen=True)
class CostTable:
    """Seconds for a batch of B rows padded to T, read off timed batches: piecewise linear in B
    at each timed T (straight on past the last timed B), then linear in T between timed lengths."""

    timed: dict[int, tuple[np.ndarray, np.ndarray]]  # T → ((k,) rows timed, (k,) seconds)

    def at(self, rows: int, padded: int) -> float:
        """At a timed length."""
        bs, secs = self.timed[padded]
        if len(bs) == 1:
            return float(secs[0] * rows)
        if rows <= bs[-1]:
            return float(np.interp(rows, bs, secs))
        slope = (secs[-1] - secs[-2]) / (bs[-1] - bs[-2])
        return float(secs[-1] + slope * (rows - bs[-1]))

    def __call__(self, rows: int, padded: int) -> float:
        lengths = sorted(self.timed)
        padded = min(max(padded, lengths[0]), lengths[-1])  # clamped to the timed range
        i = bisect.bisect_left(lengths, padded)  # lengths[i]: the first timed length >= padded
        hi = lengths[i]
        if hi == padded:
            return self.at(rows, hi)
        lo = lengths[i - 1]
        w = (padded - lo) / (hi - lo)
        return (1 - w) * self.at(rows, lo) + w * self.at(rows, hi)


def fit_costs(samples: list[tuple[int, int, float]]) -> CostTable:
    """The table of (B, T, seconds) samples. A batch never costs less for more rows or a longer
    padding, so a sample above one with as many rows or more and as long a padding or longer was
    slowed by something else on the machine: it takes that one's time (best of 5 still let
    through one batch at 2.5x its neighbours when another process ran)."""
    best = {(b, t): min(y2 for b2, t2, y2 in samples if b2 >= b and t2 >= t) for b, t, _ in samples}
    timed = {}
    for t in sorted({t for _, t in best}):
        pairs = sorted((b, y) for (b, tt), y in best.items() if tt == t)
        timed[t] = (np.array([b for b, _ in pairs], dtype=np.float64), np.array([y for _, y in pairs]))
    return CostTable(timed)


def time_batches(run: Callable[[list, int], object], dummy: Callable[[int], object], repeats: int = 5):
    """Best-of-``repeats`` seconds of every grid batch on one engine."""
    out = []
    for t in GRID_T:
        for b in GRID_B:
            if b > 1 and b * t > GRID_TOKENS:
                break
            batch = [dummy(t)] * b
            run(batch, t)  # first call of a shape: allocations
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                run(batch, t)
                best = min(best, time.perf_counter() - t0)
            out.append((b, t, best))
    return out


def side_by_side_slowdown(runs: list[Callable[[list, int], object]], dummy, seconds: float = 1.5) -> float:
    """How much slower one 1-thread engine runs while another runs beside it (B=4, T=64 batches)."""
    batch, t = [dummy(64)] * 4, 64

    def calls_per_s(run, stop_at: float, out: list) -> None:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() < stop_at:
            run(batch, t)
            n += 1
        out.append(n / (time.perf_counter() - t0))

    alone: list[float] = []
    calls_per_s(runs[0], time.perf_counter() + seconds, alone)
    both: list[float] = []
    stop = time.perf_counter() + seconds
    threads = [threading.Thread(target=calls_per_s, args=(r, stop, both)) for r in runs[:2]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return max(1.0, alone[0] / (sum(both) / len(both)))


def yield_overhead(model, dummy, repeats: int = 5) -> tuple[float, int]:
    """(seconds one preemption costs on worker 0's engine, layer groups per pass): a 256-token
    pass stepped with a 16-token batch run between every two steps, against the same work
    uninterrupted (best of ``repeats`` each: what the switches add, e.g. caches gone cold; CPU
    time of a 1-thread engine).
    (0, 1) when the backend cannot yield."""
    from openhood.scheduler.calibrate import best_time

    start = model.starter(0)
    if start is None:
        return 0.0, 1
    run = model.runner(0)
    long, short = [dummy(256)], [dummy(16)]
    steps = start(long, 256).steps

    def plain() -> None:
        run(long, 256)
        for _ in range(steps - 1):
            run(short, 16)

    def interleaved() -> None:
        p = start(long, 256)
        while not p.step():
            run(short, 16)
        p.result()

    plain(), interleaved()  # first calls of these shapes: allocations
    # CPU seconds of this thread when the engine has one thread (all its work runs here): the
    # engine's cost even on a busy machine; wall time otherwise.
    clock = time.thread_time if model.backends[0].threads == 1 else time.perf_counter
    cost = best_time(interleaved, repeats, clock) - best_time(plain, repeats, clock)
    return max(0.0, cost / (steps - 1)), steps


def row_cost_table(spec: str) -> CostTable:
    """``"32:16.0,64:26.1"`` (one row's ms per padded length) → a table where B rows cost B x one row."""
    rows = np.array([1.0, 2.0])
    timed = {}
    for pair in spec.split(","):
        t, ms = pair.split(":")
        timed[int(t)] = (rows, rows * float(ms) / 1e3)
    return CostTable(timed)


@dataclass(eq=False)
class _Job:
    work: float  # seconds left at full speed on its own threads
    threads: int
    engine: bool  # an engine batch: slowed by another engine batch running beside it
    done: Callable[[], None]


class Machine:
    """Processor sharing over ``cores``: n runnable threads run at min(1, cores / n) each."""

    def __init__(self, cores: float, interference: float):
        self.cores = cores
        self.interference = interference
        self.jobs: list[_Job] = []

    def speed(self, job: _Job) -> float:
        n = sum(j.threads for j in self.jobs)
        share = min(1.0, self.cores / n)
        engines = sum(j.engine for j in self.jobs)
        return share / self.interference if job.engine and engines > 1 else share

    def next_finish(self) -> float:
        return min((j.work / self.speed(j) for j in self.jobs), default=float("inf"))

    def advance(self, dt: float) -> list[_Job]:
        """Run every job for ``dt`` seconds; return those that finished."""
        speeds = [self.speed(j) for j in self.jobs]
        for j, s in zip(self.jobs, speeds, strict=True):
            j.work -= dt * s
        finished = [j for j in self.jobs if j.work <= 1e-12]
        self.jobs = [j for j in self.jobs if j.work > 1e-12]
        return finished


# ---- one simulated run --------------------------------------------------------------------------


@dataclass
class Setup:
    """Everything one simulated server needs (a variant changes some of it)."""

    policy: object  # BatchPolicy
    budgets: list[int]
    token_costs: list[float]  # seconds per padded token per bucket (the calibration's)
    bounds: tuple[int, ...]
    workers: int
    wide: bool
    cost_one: CostTable
    cost_wide: CostTable
    wide_threads: int
    cores: float
    interference: float
    loop_s: float
    client_s: float
    shared: bool = False
    # Layer-granular preemption (scheduler.preemption): batches run as ``layers`` steps of
    # cost/layers each, and each switch to another batch costs ``yield_s`` (measured on the engine).
    preempt: bool = False
    layers: int = 6
    yield_s: float = 0.0


@dataclass
class Outcome:
    latency_s: np.ndarray  # per request, in arrival order
    tokens: np.ndarray
    throughput: float
    wide_share: float = 0.0
    yields: int = 0


def simulate(
    setup: Setup, lengths: np.ndarray, *, rate: float | None, clients: int = 0, requests: int, seed: int
) -> Outcome:
    """Open loop at ``rate`` req/s (Poisson) or closed loop with ``clients``; ``requests`` in all."""
    from openhood.scheduler import DynamicBatcher, LengthBuckets

    rng = np.random.default_rng(seed)
    toks = lengths[rng.integers(0, len(lengths), size=requests)]
    now = [0.0]  # seconds
    noop = lambda payloads, padded: None  # noqa: E731  never called: the simulation runs batches itself
    batcher = DynamicBatcher(
        [noop] * setup.workers,
        LengthBuckets(setup.bounds),
        replace(setup.policy, preempt=setup.preempt),
        wide_run=noop if setup.wide else None,
        start=[noop] * setup.workers,  # never called either: the simulation steps runs itself
        clock=lambda: int(now[0] * 1e9),
    )
    batcher.set_token_budgets(setup.budgets)
    batcher.set_token_costs(setup.token_costs)
    machine = Machine(setup.cores, setup.interference)
    loop: deque[_Job] = deque()  # the event loop: one thread, first come first served
    sent = np.full(requests, np.nan)
    finished = np.full(requests, np.nan)
    busy = [False] * setup.workers
    timers: list[float] = []
    wide_batches = [0, 0]
    yields = [0]
    next_req = [0]

    def on_loop(work: float, then: Callable[[], None]) -> None:
        def finished_on_loop() -> None:
            loop.popleft()
            then()  # may queue more loop work (a closed-loop client's next request)
            if loop and loop[0] not in machine.jobs:
                machine.jobs.append(loop[0])

        job = _Job(work, 1, False, finished_on_loop)
        loop.append(job)
        if len(loop) == 1:
            machine.jobs.append(job)

    def send() -> None:
        i = next_req[0]
        if i >= requests:
            return
        next_req[0] += 1
        sent[i] = now[0]
        if setup.shared:  # the ideal preemptive server: every request runs at once, cores shared evenly
            machine.jobs.append(_Job(setup.cost_one(1, int(toks[i])), 1, False, lambda: respond(i)))
            return
        on_loop(setup.loop_s / 2, lambda: batcher.submit([i], [int(toks[i])]))

    def respond(i: int) -> None:
        finished[i] = now[0]
        if clients:
            send()

    def finish(w: int, wide: bool, items: list) -> None:
        busy[w] = False
        batcher.batch_done(w, wide)
        for it in items:
            on_loop(setup.loop_s / 2, lambda i=it.payload: respond(i))

    def step(w: int, run, switched: bool) -> None:
        """One layer group of a preemptible run on worker ``w`` (a switch first pays ``yield_s``)."""
        if run.done_steps == 0:
            run.steps = setup.layers
        cost = setup.cost_one(len(run.items), run.padded_len) / setup.layers + (setup.yield_s if switched else 0.0)

        def stepped() -> None:
            if run.done_steps + 1 == run.steps:
                finish(w, False, run.items)
                return
            nxt = batcher.yield_point(w, run)
            yields[0] += nxt is not run
            step(w, nxt, nxt is not run)

        machine.jobs.append(_Job(cost, 1, True, stepped))

    def dispatch() -> None:
        for w in range(setup.workers):
            if busy[w]:
                continue
            run, wait_s, wide = batcher.next_run(w)
            if run is None:
                if wait_s is not None:
                    heapq.heappush(timers, now[0] + wait_s)
                continue
            busy[w] = True
            wide_batches[0] += wide
            wide_batches[1] += run.done_steps == 0
            if setup.preempt and not wide:
                step(w, run, run.done_steps > 0)  # a resumed run pays the switch back
                continue
            cost = (setup.cost_wide if wide else setup.cost_one)(len(run.items), run.padded_len)
            machine.jobs.append(
                _Job(
                    cost,
                    setup.wide_threads if wide else 1,
                    True,
                    lambda w=w, wide=wide, r=run: finish(w, wide, r.items),
                )
            )

    if clients:
        arrivals: list[float] = []
        for _ in range(min(clients, requests)):
            send()
    else:
        arrivals = list(np.cumsum(rng.exponential(1.0 / rate, size=requests))[::-1])  # popped from the end
    while True:
        t_arrival = arrivals[-1] if arrivals else float("inf")
        t_finish = now[0] + machine.next_finish()
        t_timer = timers[0] if timers else float("inf")
        t_next = min(t_arrival, t_finish, t_timer)
        if t_next == float("inf"):
            break
        finished_jobs = machine.advance(t_next - now[0])
        now[0] = t_next
        for job in finished_jobs:
            job.done()
        while timers and timers[0] <= now[0]:
            heapq.heappop(timers)
        if arrivals and arrivals[-1] <= now[0]:
            arrivals.pop()
            send()
        dispatch()
    ok = ~np.isnan(finished)
    latency = finished - sent + setup.client_s
    span = np.nanmax(finished) - np.nanmin(sent)
    return Outcome(latency[ok], toks[ok], ok.sum() / span, wide_batches[0] / max(1, wide_batches[1]), yields[0])


def bucket_ratios(out: Outcome, min_samples: int) -> dict[str, tuple[float, float, int]]:
    """Per load-test token bucket with enough samples: (P50 ms, P99 ms, count)."""
    from openhood.loadtest.stats import bucket_index
    from openhood.scheduler.buckets import LENGTH_LABELS

    idx = bucket_index(out.tokens.astype(np.float64))
    res = {}
    for b, name in enumerate(LENGTH_LABELS):
        lat = out.latency_s[idx == b] * 1e3
        if lat.size >= min_samples:
            p50, p99 = np.percentile(lat, [50, 99])
            res[name] = (float(p50), float(p99), int(lat.size))
    return res


# ---- set-up from the real engine ---------------------------------------------------------------


def verdict(ratios: list[float], limit: float) -> str:
    """A rate passes when most of its seeds do, as ``loadtest.sweep`` judges a rate on repeats."""
    return "pass" if sum(r <= limit for r in ratios) > len(ratios) // 2 else "fail"


def corpus_lengths(path: str, max_chars: int, folder, limit: int = 20000) -> np.ndarray:
    """Token counts (special tokens included, truncated at the model's max) of the corpus texts
    cut at ``max_chars``, as the load test sends them."""
    from openhood.corpus import read_texts
    from openhood.tokenizer import WordPieceTokenizer

    texts = [t[:max_chars] for t in read_texts(path, limit=limit) if t]
    tok = WordPieceTokenizer.from_pretrained(folder)
    return np.asarray(tok.encode_batch(texts, max_length=256).lengths, dtype=np.int64)


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, spec = text.partition(":")
    pairs = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
    return name, pairs


def apply_variant(base: Setup, pairs: dict[str, str]) -> Setup:
    """Overrides: any BatchPolicy field, or wide / workers / loop_ms / yield_ms / preempt / cores /
    interference / shared / budget."""
    policy_fields = {f.name for f in fields(base.policy)}
    policy_changes, setup_changes = {}, {}
    for key, value in pairs.items():
        if key == "preempt":  # the simulation's own switch (BatchPolicy.preempt follows it)
            setup_changes["preempt"] = value not in ("0", "false", "off")
        elif key in policy_fields:
            current = getattr(base.policy, key)
            policy_changes[key] = type(current)(value)
        elif key == "wide":
            setup_changes["wide"] = value not in ("0", "false", "off")
        elif key == "workers":
            setup_changes["workers"] = int(value)
        elif key == "yield_ms":
            setup_changes["yield_s"] = float(value) / 1e3
        elif key == "loop_ms":
            setup_changes["loop_s"] = float(value) / 1e3
        elif key == "cores":
            setup_changes["cores"] = float(value)
        elif key == "interference":
            setup_changes["interference"] = float(value)
        elif key == "shared":
            setup_changes["shared"] = value not in ("0", "false", "off")
        elif key == "budget":  # one token budget for every bucket (no calibration)
            setup_changes["budgets"] = [max(int(value), b) for b in base.bounds]
        else:
            raise SystemExit(f"unknown variant key {key!r}")
    return replace(base, policy=replace(base.policy, **policy_changes), **setup_changes)


def main(argv: list[str] | None = None) -> int:
    from openhood.engine.kernels.cores import available_cores
    from openhood.loadtest.stats import Slo
    from openhood.models import EngineOptions, ModelSpec, load_model, resolve_model_dir
    from openhood.scheduler import LengthBuckets
    from openhood.scheduler.calibrate import calibrate, token_budget
    from openhood.server.config import ServerConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "numpy"])
    ap.add_argument("--max-chars", type=int, default=1000)
    ap.add_argument("--fractions", default="0.2,0.3,0.4,0.5,0.6,0.7,0.8", help="open-loop rates, × the modelled max")
    ap.add_argument("--requests", type=int, default=8000, help="per rate and seed (>= 500 in the 129-256 bucket)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--timing-repeats", type=int, default=5, help="best of this many per timed batch")
    # Defaults from benchmarks/tail_stages.py --rate 5 (server time neither queue nor inference;
    # client minus server) and benchmarks/serving.py (the load generator's CPU), docs/benchmarks.md.
    ap.add_argument("--loop-ms", type=float, default=3.0, help="event-loop CPU per request")
    ap.add_argument("--client-ms", type=float, default=3.5, help="latency outside the server per request")
    ap.add_argument("--client-cores", type=float, default=0.15, help="cores the load generator holds")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...")
    ap.add_argument(
        "--json",
        help="write each variant's worst-bucket P99/P50 per rate and seed here (benchmarks/serving.py --model-json)",
    )
    ap.add_argument(
        "--row-costs",
        metavar="T:MS,...[/T:MS,...]",
        help="skip the timing: one row's engine ms per padded length on the 1-thread engine [/ the wide one], "
        "B rows costing B x one row (no batching gain), engines side by side not slowing each other, "
        "budgets and token costs derived as the calibration would; for a quiet machine's costs on a busy one",
    )
    ap.add_argument("--yield-ms", type=float, default=0.0, help="with --row-costs: the cost of one preemption")
    ap.add_argument("--plot", help="write an SVG of the worst bucket's P99/P50 (median of the seeds) against the rate")
    args = ap.parse_args(argv)

    cores = available_cores()
    config = ServerConfig()
    folder = resolve_model_dir(None)
    spec = ModelSpec(path=str(folder))
    workers = config.worker_count(cores)
    one = load_model(spec, EngineOptions(backend=args.backend, threads=config.engine_threads(cores), workers=workers))
    wide_threads = config.wide_threads(cores) or cores
    wide = load_model(spec, EngineOptions(backend=args.backend, threads=wide_threads))
    dummy = one.preprocessor.dummy
    bounds = LengthBuckets.for_model(config.buckets, one.max_length).bounds
    t0 = time.perf_counter()
    policy = config.batch_policy()
    policy = replace(policy, max_batch_tokens=max(policy.max_batch_tokens, bounds[-1]))
    if args.row_costs:
        one_ms, _, wide_ms = args.row_costs.partition("/")
        cost_one = row_cost_table(one_ms)
        cost_wide = row_cost_table(wide_ms or one_ms)
        slowdown, yield_s = 1.0, args.yield_ms / 1e3
        start = one.starter(0)
        layers = start([dummy(bounds[0])], bounds[0]).steps if start is not None else 1
        token_costs = [cost_one(1, t) / t for t in bounds]
        lone_s = cost_one(1, bounds[0])
        budgets = [
            token_budget(lone_s, c, min_tokens=t, max_tokens=policy.max_batch_tokens)
            for t, c in zip(bounds, token_costs, strict=True)
        ]
    else:
        cost_one = fit_costs(time_batches(one.runner(0), dummy, args.timing_repeats))
        cost_wide = fit_costs(time_batches(wide.runner(0), dummy, args.timing_repeats))
        slowdown = side_by_side_slowdown([one.runner(0), one.runner(1)], dummy) if workers > 1 else 1.0
        cal = calibrate(one.runner(0), dummy, bounds, max_tokens=policy.max_batch_tokens)
        budgets, token_costs = cal.budgets, [cal.cost_per_token[t] for t in bounds]
        yield_s, layers = yield_overhead(one, dummy, args.timing_repeats)
    lengths = corpus_lengths(args.corpus, args.max_chars, folder)
    base = Setup(
        policy=policy,
        budgets=budgets,
        token_costs=token_costs,
        bounds=bounds,
        workers=workers,
        wide=config.wide,
        cost_one=cost_one,
        cost_wide=cost_wide,
        wide_threads=wide_threads,
        cores=cores - args.client_cores,
        interference=slowdown,
        loop_s=args.loop_ms / 1e3,
        client_s=args.client_ms / 1e3,
        preempt=policy.preempt and layers > 1,  # what the server does: only an engine that yields preempts
        layers=layers,
        yield_s=yield_s,
    )
    print(
        f"{args.backend}, {cores} cores, {workers} workers x {config.engine_threads(cores)} thread + wide {wide_threads}; "
        f"measured in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    for name, fit in (("1-thread", cost_one), (f"wide {wide_threads}-thread", cost_wide)):
        rows = " / ".join(f"{fit(1, t) * 1e3:.1f}" for t in GRID_T)
        print(
            f"cost {name}: one row of {' / '.join(map(str, GRID_T))} tokens {rows} ms; "
            f"512 tokens as 16 x 32 {fit(16, 32) * 1e3:.1f} ms"
        )
    print(
        f"two 1-thread engines side by side: {slowdown:.2f}x slower each; budgets {dict(zip(bounds, budgets, strict=True))}"
    )
    if layers > 1:
        source = "--yield-ms" if args.row_costs else "measured on the engine"
        print(f"preemption: {layers} layer groups per pass, {yield_s * 1e3:.3f} ms per yield ({source})")
    print(
        f"corpus: {len(lengths)} texts, tokens P50 {np.median(lengths):.0f} P90 {np.percentile(lengths, 90):.0f}; "
        f"loop {args.loop_ms} ms CPU/request, client {args.client_ms} ms, load generator {args.client_cores} cores"
    )
    slo = Slo()
    variants = [("served", base)] + [
        (name, apply_variant(base, pairs)) for name, pairs in map(parse_variant, args.variant)
    ]
    fractions = [float(f) for f in args.fractions.split(",")]
    curves = []  # (variant, × openhood's modelled max, median worst ratio) for --plot
    predictions: dict[str, dict[str, list[float]]] = {}  # variant → "0.50" → worst ratio per seed (--json)
    served_max = None
    for name, setup in variants:
        closed = simulate(setup, lengths, rate=None, clients=CLOSED_CLIENTS, requests=args.requests, seed=0)
        served_max = served_max or closed.throughput  # the first variant is the served policy
        lone = simulate(setup, lengths, rate=None, clients=1, requests=min(2000, args.requests), seed=0)
        print(
            f"\n### {name}: modelled closed-loop max ({CLOSED_CLIENTS} clients) {closed.throughput:.1f} req/s; "
            f"1 client P50 {np.median(lone.latency_s) * 1e3:.1f} ms ({lone.wide_share:.0%} wide)"
            + (f"; preemptive, {closed.yields} yields in the closed-loop run" if setup.preempt else "")
        )
        print(
            "| rate req/s | × max | worst bucket P99/P50 per seed | P50 / P99 ms per bucket (seed 0) | wide | SLO "
            "| SLO on 0-32, 33-64 only |"
        )
        print("|---:|---:|---|---|---:|---|---|")
        xs, ys = [], []
        for f in fractions:
            rate = f * closed.throughput
            worst, short, detail, wide_share = [], [], "", 0.0
            for seed in range(args.seeds):
                out = simulate(setup, lengths, rate=rate, requests=args.requests, seed=seed + 1)
                per = bucket_ratios(out, slo.min_samples)
                w = max(per.items(), key=lambda kv: kv[1][1] / kv[1][0])
                worst.append((w[1][1] / w[1][0], w[0]))
                # What a 1500-request run checks: only these two buckets reach 500 samples there.
                short.append(
                    max((p99 / p50 for k, (p50, p99, _) in per.items() if k in SHORT_BUCKETS), default=float("nan"))
                )
                if seed == 0:
                    wide_share = out.wide_share
                    detail = ", ".join(f"{k} {p50:.0f}/{p99:.0f}" for k, (p50, p99, _) in per.items())

            cells = " / ".join(f"{r:.2f} ({b})" for r, b in worst)
            print(
                f"| {rate:.1f} | {f:.2f} | {cells} | {detail} | {wide_share:.0%} | {verdict([r for r, _ in worst], slo.bucket_ratio)} "
                f"| {verdict(short, slo.bucket_ratio)} ({' / '.join(f'{r:.2f}' for r in short)}) |",
                flush=True,
            )
            predictions.setdefault(name, {})[f"{f:.2f}"] = [round(r, 3) for r, _ in worst]
            xs.append(rate / served_max)
            ys.append(float(np.median([r for r, _ in worst])))
        curves.append((name, xs, ys))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(predictions, fh, indent=1)
    if args.plot:
        from openhood.loadtest.svgplot import lines

        svg = lines(
            curves,
            title="Worst length bucket's P99 / P50 under open-loop load (modelled)",
            xlabel="offered rate / the served policy's modelled closed-loop max",
            ylabel="P99 / P50, median of seeds",
            plot_id="slo-model",
            hline=(f"SLO: {slo.bucket_ratio:g}x", slo.bucket_ratio),
        )
        with open(args.plot, "w") as fh:
            fh.write(svg + "\n")
        print(f"\nplot: {args.plot}")
    for m in (one, wide):
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
