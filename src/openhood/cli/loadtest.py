"""``openhood loadtest URL`` and ``openhood profile --pid PID``.

Argument parsing and printing only; the work lives in runner / stats / sweep / report /
profiler, which import their heavy dependencies (httpx, numpy) when a command runs.
"""

from __future__ import annotations

import functools
import json
import sys

from openhood.cli import validate as v
from openhood.cli.validate import usage_error


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "loadtest",
        help="open/closed-loop load test of an embeddings server, with an SLO verdict and report",
        description="Load-test an OpenAI-compatible /v1/embeddings endpoint. Open loop (--rate, Poisson "
        "arrivals, latency timed from each request's scheduled arrival) or closed loop "
        "(--concurrency). Loopback targets only unless --allow-remote.",
    )
    p.add_argument("url", help="server base URL (POSTs to /v1/embeddings) or a full endpoint URL")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--rate", type=v.positive_float, help="open loop: mean requests/s (Poisson arrivals)")
    mode.add_argument("--concurrency", type=v.positive_int, help="closed loop: number of clients")
    p.add_argument("--duration", type=v.positive_float, default=15.0, help="measured seconds per run (default 15)")
    p.add_argument("--warmup", type=v.non_negative_float, default=2.0, help="seconds sent before measuring (default 2)")
    p.add_argument("--corpus", type=v.existing_file, help="JSONL file with a 'text' field; default: a generated corpus")
    p.add_argument("--max-chars", type=v.positive_int, help="cut each text to this many characters")
    p.add_argument("--corpus-limit", type=v.positive_int, help="read only the first N corpus lines")
    p.add_argument("--batch", type=v.positive_int, default=1, help="texts per request (default 1)")
    p.add_argument("--model", help="value of the request's 'model' field (omitted by default)")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals and text draws (default 0)")
    p.add_argument("--timeout", type=v.positive_float, help="read timeout in s (default 3 x --p99-budget)")
    p.add_argument(
        "--pool", type=v.positive_int, help="max connections (default: concurrency, or 2 x rate x P99 budget)"
    )
    p.add_argument("--max-requests", type=v.positive_int, default=200_000, help="hard cap on requests per run")
    p.add_argument(
        "--p99-budget", type=v.positive_float, default=500.0, help="SLO: overall P99 budget in ms (default 500)"
    )
    p.add_argument(
        "--bucket-ratio",
        type=v.positive_float,
        default=None,
        help="SLO: max P99/P50 per length bucket (default: scheduler.policy.TAIL_RATIO, 3)",
    )
    p.add_argument(
        "--min-bucket-samples",
        type=v.non_negative_int,
        default=None,
        help="SLO: buckets with fewer samples are not checked (default: loadtest.stats.Slo's, 500)",
    )
    p.add_argument("--sweep", action="store_true", help="step/bisect the open-loop rate to the highest passing the SLO")
    p.add_argument("--sweep-start", type=v.positive_float, default=10.0, help="first sweep rate (default 10 req/s)")
    p.add_argument("--sweep-max", type=v.positive_float, default=2000.0, help="highest sweep rate (default 2000 req/s)")
    p.add_argument("--sweep-factor", type=v.positive_float, default=2.0, help="step multiplier (default 2)")
    p.add_argument(
        "--sweep-bisect", type=v.non_negative_int, default=3, help="bisection steps near the boundary (default 3)"
    )
    p.add_argument(
        "--sweep-repeats",
        type=v.positive_int,
        default=3,
        help="runs per probed rate (seeds seed, seed+1, ...); the rate passes when a majority pass (default 3)",
    )
    p.add_argument(
        "--sweep-requests",
        type=v.non_negative_int,
        default=0,
        help="each sweep run lasts at least N / rate seconds, so the checked buckets get their samples "
        "(default 0: --duration)",
    )
    p.add_argument(
        "--wait-ready", type=v.non_negative_float, default=30.0, help="wait up to N s for GET /health/ready (0: don't)"
    )
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback target (you must own it)")
    p.add_argument("--json", action="store_true", help="print the JSON summary on stdout instead of text")
    p.add_argument("--report", metavar="DIR", help="write DIR/index.html with plots, summary.json, requests.csv")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    _register_chat(p)
    p.set_defaults(func=cmd_loadtest)

    q = subparsers.add_parser(
        "profile",
        help="record a py-spy flame graph of a running server",
        description="Attach py-spy to a running process and write a flame graph SVG.",
    )
    q.add_argument("--pid", type=v.positive_int, required=True, help="process id (e.g. of `openhood serve`)")
    q.add_argument("--duration", type=v.positive_float, default=30.0, help="seconds to record (default 30)")
    q.add_argument("--out", default="profile.svg", help="output SVG (default profile.svg)")
    q.add_argument("--rate", type=v.positive_int, default=100, help="samples per second (default 100)")
    q.add_argument("--native", action="store_true", help="include native frames (BLAS, ONNX Runtime)")
    q.add_argument("--subprocesses", action="store_true", help="also profile child processes")
    q.add_argument("--idle", action="store_true", help="include idle (waiting) threads")
    q.set_defaults(func=cmd_profile)


def cmd_loadtest(args) -> int:
    from openhood.loadtest.stats import format_summary

    if args.chat:
        return _chat(args)
    try:
        target, corpus = _target_and_corpus(args)
    except (OSError, ValueError) as exc:  # RemoteTargetError is a PermissionError, CorpusError a ValueError
        return _fail(str(exc))
    run_once = _RunOnce(args, target, corpus)
    try:
        if args.sweep:
            return _sweep(args, run_once)
        result, summary = run_once(args.rate, args.concurrency, args.seed)
        print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
        if args.report:
            _write_report(args, result, summary)
    except (ValueError, ConnectionError) as exc:
        return _fail(str(exc))
    return 0 if summary["ok"] > 0 else 1


_fail = functools.partial(usage_error, "loadtest")


def _log(args):
    return (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))


def _target_and_corpus(args):
    """The checked target and the text corpus; ValueError/OSError for a usage mistake."""
    from openhood.loadtest.corpus import TextCorpus, synthetic_corpus
    from openhood.loadtest.target import check_target, parse_target

    target = parse_target(args.url)
    check_target(target, allow_remote=args.allow_remote)
    if not args.sweep and args.rate is None and args.concurrency is None:
        raise ValueError("give --rate R (open loop), --concurrency N (closed loop), or --sweep")
    if args.sweep and args.concurrency is not None:
        raise ValueError("--sweep steps the open-loop rate; it cannot be combined with --concurrency")
    if args.corpus:
        return target, TextCorpus.from_jsonl(args.corpus, max_chars=args.max_chars, limit=args.corpus_limit)
    corpus = synthetic_corpus()
    return target, TextCorpus(corpus.texts, max_chars=args.max_chars) if args.max_chars else corpus


class _RunOnce:
    """``(rate, concurrency, seed) -> (result, summary)``: one load test with the command's
    settings; only the first run waits for the server's readiness."""

    def __init__(self, args, target, corpus):
        from openhood.loadtest.stats import Slo

        self.args, self.target, self.corpus = args, target, corpus
        self.slo = Slo(
            p99_budget_ms=args.p99_budget,
            bucket_ratio=args.bucket_ratio or Slo.bucket_ratio,
            min_samples=Slo.min_samples if args.min_bucket_samples is None else args.min_bucket_samples,
        )
        self.ready_wait = args.wait_ready

    def __call__(self, rate, concurrency, seed, duration=None):
        from openhood.loadtest.client import plan_client
        from openhood.loadtest.runner import RunConfig, default_progress, run
        from openhood.loadtest.stats import summarize

        a = self.args
        cfg = RunConfig(
            url=self.target.url,
            rate=rate,
            concurrency=concurrency,
            duration=duration or a.duration,
            warmup=a.warmup,
            batch=a.batch,
            seed=seed,
            max_requests=a.max_requests,
            model=a.model,
        )
        plan = plan_client(
            rate=rate,
            concurrency=concurrency,
            p99_budget_s=a.p99_budget / 1e3,
            timeout_s=a.timeout,
            max_connections=a.pool,
        )
        result = run(
            cfg,
            plan,
            self.corpus.sampler(seed + 1),
            progress=default_progress(not a.quiet),
            wait_ready_s=self.ready_wait,
            ready_url=self.target.ready_url,
        )
        self.ready_wait = 0.0
        return result, summarize(result, self.slo)


def _sweep(args, run_once: _RunOnce) -> int:
    """The open-loop rate sweep: its table, and the report of the best (or lowest) rate."""
    from openhood.loadtest.sweep import format_sweep, rate_sweep

    log = _log(args)

    def run_at(rate, seed):
        return run_once(rate, None, seed, max(args.duration, args.sweep_requests / rate))

    sweep = rate_sweep(
        run_at,
        start=args.sweep_start,
        max_rate=args.sweep_max,
        seed=args.seed,
        factor=args.sweep_factor,
        bisect_steps=args.sweep_bisect,
        repeats=args.sweep_repeats,
        p99_budget_ms=args.p99_budget,
        log=log,
    )
    best = sweep.pop("best")
    print(
        json.dumps({"sweep": sweep, "run": best[1] if best else None}, indent=2) if args.json else format_sweep(sweep)
    )
    if args.report:
        if best is None:
            log("no passing rate: the report shows the lowest rate tried")
            best = run_once(sweep["runs"][0]["rate"], None, args.seed)
        _write_report(args, best[0], best[1], sweep)
    return 0 if sweep["best_rate"] is not None else 1


def _write_report(args, result, summary: dict, sweep: dict | None = None) -> None:
    from openhood.loadtest.report import write_report

    _log(args)(f"report: {write_report(args.report, result, summary, sweep)}")


def _register_chat(p) -> None:
    c = p.add_argument_group("chat mode", "streaming /v1/chat/completions, closed loop (docs/loadtest.md § Chat mode)")
    c.add_argument(
        "--chat",
        action="store_true",
        help="load-test a streaming chat endpoint (URL: base or /v1/chat/completions or /v1/completions)",
    )
    c.add_argument(
        "--levels",
        type=v.int_list,
        metavar="N,N,...",
        help="concurrency levels run one after another, e.g. 1,4,16 (default: --concurrency)",
    )
    c.add_argument(
        "--prompt-tokens",
        default="lognormal:64:0.8:512",
        metavar="DIST",
        help="prompt length: N, LO-HI or lognormal:MEDIAN:SIGMA[:MAX] (default lognormal:64:0.8:512)",
    )
    c.add_argument(
        "--output-tokens",
        default="lognormal:64:0.5:256",
        metavar="DIST",
        help="max_tokens per request, same forms (default lognormal:64:0.5:256)",
    )
    c.add_argument("--temperature", type=v.non_negative_float, default=0.0, help="sampling temperature (default 0)")
    c.add_argument(
        "--drain",
        type=v.non_negative_float,
        default=120.0,
        help="seconds after each level's window for running streams to end; then cut (default 120)",
    )


def _chat(args) -> int:
    """Chat mode: every level's TTFT, inter-token and tokens/s table, the report, exit status."""
    from openhood.loadtest.chat import ChatConfig, chat_url, run_chat
    from openhood.loadtest.chat_stats import format_chat_summary, summarize_chat
    from openhood.loadtest.chat_workload import ChatWorkload, LengthDist
    from openhood.loadtest.client import CONNECT_TIMEOUT_S, ClientPlan
    from openhood.loadtest.corpus import TextCorpus
    from openhood.loadtest.target import check_target, parse_target

    try:
        if args.rate is not None or args.sweep:
            raise ValueError("chat mode is closed loop: give --levels or --concurrency, not --rate/--sweep")
        levels = args.levels or ((args.concurrency,) if args.concurrency else None)
        if levels is None:
            raise ValueError("chat mode needs --levels N,N,... or --concurrency N")
        target = parse_target(chat_url(args.url))
        check_target(target, allow_remote=args.allow_remote)
        prompt_dist, output_dist = LengthDist.parse(args.prompt_tokens), LengthDist.parse(args.output_tokens)
        texts = TextCorpus.from_jsonl(args.corpus, limit=args.corpus_limit).texts if args.corpus else None
        cfg = ChatConfig(
            url=target.url,
            levels=levels,
            duration=args.duration,
            warmup=args.warmup,
            seed=args.seed,
            max_requests=args.max_requests,
            model=args.model,
            temperature=args.temperature,
            drain=args.drain,
        )
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    # A stream may pause for a long prefill under load, so the per-read timeout is generous; a
    # hard total per request still bounds every stream (chat.hard_timeout).
    read = args.timeout or 60.0
    plan = ClientPlan(
        max_connections=args.pool or max(levels),
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=read,
        pool_timeout=read,
    )
    try:
        result = run_chat(
            cfg,
            plan,
            lambda: ChatWorkload(prompt_dist, output_dist, args.seed, texts),
            wait_ready_s=args.wait_ready,
            ready_url=target.ready_url,
            log=_log(args),
        )
    except (ValueError, ConnectionError) as exc:
        return _fail(str(exc))
    summary = summarize_chat(result)
    print(json.dumps(summary, indent=2) if args.json else format_chat_summary(summary))
    if args.report:
        from openhood.loadtest.chat_report import write_chat_report

        _log(args)(f"report: {write_chat_report(args.report, result, summary)}")
    return 0 if all(lv["ok"] > 0 for lv in summary["levels"]) else 1


def cmd_profile(args) -> int:
    from openhood.loadtest.profiler import ProfilerError, record

    try:
        out = record(
            args.pid,
            args.out,
            duration_s=args.duration,
            rate_hz=args.rate,
            native=args.native,
            subprocesses=args.subprocesses,
            idle=args.idle,
        )
    except ProfilerError as exc:
        print(f"openhood profile: error: {exc}", file=sys.stderr)
        return 2
    print(f"flame graph written to {out} (open it in a browser; see docs/loadtest.md)")
    return 0
