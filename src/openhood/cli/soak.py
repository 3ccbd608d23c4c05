"""``openhood soak``: mixed traffic for N requests or T seconds against a server (``--url``) or one
it starts (``--model``), sampling ``/debug/memory``; exits 1 when RSS grows past ``--max-growth``.

Argument parsing and printing only; the work is in ``openhood.soak`` (docs/soak.md).
"""

from __future__ import annotations

import functools
import json
import shlex
import sys

from openhood.cli.validate import usage_error
from openhood.progress import StatusLine


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "soak",
        help="soak-test a server with mixed traffic and hunt memory leaks (needs --debug-endpoints)",
        description="Send mixed traffic (every served model, varied lengths, error requests, oversized and malformed "
        "bodies, client disconnects) while sampling the server's /debug/memory; fit RSS growth after a "
        "warm-up and report the top growing allocation sites and object types. Loopback only unless "
        "--allow-remote. Exit 0 = pass, 1 = growth over --max-growth, 2 = usage error.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running `openhood serve --debug-endpoints`")
    where.add_argument(
        "--model",
        action="append",
        metavar="[NAME=]PATH",
        help="start a server of our own serving this model (repeatable)",
    )
    p.add_argument("--serve-args", default="", help="extra `openhood serve` flags for --model, one string")
    p.add_argument("--requests", type=int, help="stop after N requests")
    p.add_argument("--seconds", type=float, help="stop after T seconds (default 60 when --requests is not given)")
    p.add_argument("--concurrency", type=int, default=4, help="client threads (default 4)")
    p.add_argument("--sample-every", type=float, default=1.0, help="seconds between /debug/memory samples (default 1)")
    p.add_argument("--warmup", type=float, default=0.3, help="fraction of the run left out of the fit (default 0.3)")
    p.add_argument(
        "--max-growth",
        type=float,
        default=2.0,
        help="fail when fitted RSS grows more than this %% from mid-run to end (default 2)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="read timeout per request in s (default 60)")
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=None,
        help="seconds to wait for /health/ready (default 300 with --model, 30 with --url)",
    )
    p.add_argument("--api-key", help="Bearer key of the server (also for /debug/memory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", metavar="DIR", help="write DIR/soak.json and DIR/index.html")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON instead of text")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --url (you must own it)")
    p.set_defaults(func=cmd_soak)


_fail = functools.partial(usage_error, "soak")


def cmd_soak(args) -> int:
    import tempfile
    from contextlib import nullcontext
    from pathlib import Path

    from openhood.loadtest.target import check_target, parse_target
    from openhood.soak.analysis import analyze, format_summary
    from openhood.soak.launch import LaunchedServer
    from openhood.soak.report import write_report
    from openhood.soak.runner import SoakConfig, SoakError, run_soak

    if (args.requests is not None and args.requests < 1) or (args.seconds is not None and args.seconds <= 0):
        return _fail("--requests and --seconds must be positive")
    if not 0 <= args.warmup < 1 or args.concurrency < 1 or args.sample_every <= 0:
        return _fail("--warmup must be in [0, 1), --concurrency >= 1, --sample-every > 0")
    if args.ready_timeout is not None and args.ready_timeout <= 0:
        return _fail("--ready-timeout must be positive")
    seconds = args.seconds if args.seconds is not None or args.requests is not None else 60.0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="openhood-soak-"))
    if args.url:
        try:
            check_target(parse_target(args.url), allow_remote=args.allow_remote)
        except (OSError, ValueError) as exc:
            return _fail(str(exc))
    server = LaunchedServer(args.model, out / "server.log", shlex.split(args.serve_args)) if args.model else None
    base_url = server.url if server else args.url.rstrip("/")
    cfg = SoakConfig(
        base_url=base_url,
        requests=args.requests,
        seconds=seconds,
        concurrency=args.concurrency,
        sample_every_s=args.sample_every,
        timeout_s=args.timeout,
        api_key=args.api_key,
        seed=args.seed,
        wait_ready_s=args.ready_timeout or (300.0 if server else 30.0),
    )
    status = StatusLine(tty_interval=0.0, log_interval=30.0)
    with server or nullcontext():
        try:
            run = run_soak(cfg, progress=lambda run: status.update(_progress_text(run)))
        except (SoakError, ValueError) as exc:
            where = f" (server log: {out / 'server.log'})" if server else ""
            return _fail(f"{exc}{where}")
    status.close()
    analysis = analyze(run.samples, warmup=args.warmup, max_growth_pct=args.max_growth)
    page = write_report(out, analysis, run, {k: v for k, v in vars(args).items() if k != "func"})
    print(json.dumps(analysis, indent=2) if args.json else format_summary(analysis))
    print(f"report: {page}", file=sys.stderr)
    if run.stopped_early:
        print(f"openhood soak: stopped early by SIGINT after {run.sent} requests", file=sys.stderr)
    if run.unexpected:
        print(f"openhood soak: {run.unexpected} valid requests did not get 200: {dict(run.outcomes)}", file=sys.stderr)
    return 0 if analysis["verdict"] == "pass" else 1


def _progress_text(run) -> str:
    mem = run.samples[-1]["memory"]["process"]
    return f"{run.samples[-1]['t']:7.1f} s  {run.sent:7d} requests  RSS {mem['rss_bytes'] / 2**20:8.1f} MB"
