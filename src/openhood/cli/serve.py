"""``openhood serve`` (the HTTP server) and ``openhood buckets`` (derive length buckets from a corpus).

Heavy imports (FastAPI, uvicorn, the engine) happen inside the command functions, so other
sub-commands do not pay for them. ``serve`` loads every ``--model NAME=PATH`` (or the models of
a ``--config`` TOML file) one after the other, logging what each one costs in memory, then runs
uvicorn programmatically through ``DrainingServer`` so SIGTERM/SIGINT drain the queues instead
of cutting requests off.
"""

from __future__ import annotations

import argparse
import os

from openhood.cli import validate as v
from openhood.scheduler.policy import PRIORITIES, GenerationPolicy
from openhood.server.config import DEFAULT_BUCKETS, ServerConfig


def register(subparsers, environ=os.environ) -> None:
    d = ServerConfig()
    p = subparsers.add_parser(
        "serve",
        help="serve one or more models over HTTP (OpenAI-compatible embeddings and completions) with batching",
        description="Serve POST /v1/embeddings, /v1/chat/completions and /v1/completions (OpenAI-compatible; "
        "a .gguf model is served for generation), /v1/models, /health/live, /health/ready, /metrics and /stats "
        "for one or more models, routed by the request's 'model'. See docs/server.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        action=AppendOverDefault,
        default=None,
        metavar="[NAME=]PATH",
        help="a model folder (or a decoder's .gguf file) to serve, optionally named (repeatable; the first is "
        "the default of its task; default: the bundled all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE.toml",
        help="serve the [[models]] of this TOML file (name, path, task, backend, precision, buckets); "
        "its [server] table sets any flag left at its default (docs/server.md)",
    )
    p.add_argument("--backend", default=d.backend, choices=("numpy", "onnxruntime"))
    p.add_argument(
        "--precision", default=d.precision, help="passed to the engine (fp32; others when the backend offers them)"
    )
    p.add_argument(
        "--workers",
        type=v.positive_int,
        default=d.workers,
        help="inference worker threads, each with its own engine (default: 2 where there are 2+ cores); "
        "with more than one, a short request can start while a long batch runs (docs/benchmarks.md)",
    )
    p.add_argument(
        "--threads",
        type=v.positive_int,
        default=d.threads,
        help="intra-op threads per engine (default: the cores divided by --workers)",
    )
    p.add_argument(
        "--wide",
        action=argparse.BooleanOptionalAction,
        default=d.wide,
        help="run a lone request on an idle server on an extra engine with every core's threads "
        "(when the workers' engines have fewer); --no-wide: always the workers' engines",
    )
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=v.port, default=d.port)
    p.add_argument("--max-batch-size", type=v.positive_int, default=d.max_batch_size, help="rows per engine call")
    p.add_argument(
        "--max-batch-tokens",
        type=v.positive_int,
        default=d.max_batch_tokens,
        help="padded tokens (B x T) per engine call (default: calibrated at start-up so one batch costs "
        "at most 2x a lone short request on this machine; docs/server.md)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=v.non_negative_float,
        default=d.max_wait_ms,
        help="how long the oldest request may wait for batch-mates",
    )
    p.add_argument(
        "--buckets",
        type=v.int_list,
        default=DEFAULT_BUCKETS,
        help="comma list of padded lengths (the model max is always added); derive yours with `openhood buckets --corpus`",
    )
    p.add_argument(
        "--pad-to",
        default=d.pad_to,
        choices=("longest", "bucket"),
        help="pad a batch to its longest sequence or to its bucket's bound",
    )
    p.add_argument(
        "--priority",
        default=d.priority,
        choices=PRIORITIES,
        help="which ready bucket runs first: the shortest (unless another waited --max-age-ms) or the oldest",
    )
    p.add_argument(
        "--max-age-ms",
        type=v.non_negative_float,
        default=d.max_age_ms,
        help="with --priority shortest: a request this old goes first",
    )
    p.add_argument(
        "--short-lane-tokens",
        type=v.non_negative_int,
        default=d.short_lane_tokens,
        help="with 2+ workers, worker 0 only runs buckets up to this many tokens, so a short request "
        "never waits behind long batches on every worker (0 = off)",
    )
    p.add_argument(
        "--wide-quiet-ms",
        type=v.non_negative_float,
        default=d.wide_quiet_ms,
        help="with --wide: a lone request runs on every core only after this long without overlapping "
        "requests (sequential traffic); 0 = whenever the server is idle",
    )
    p.add_argument(
        "--preempt",
        action=argparse.BooleanOptionalAction,
        default=d.preempt,
        help="a running batch yields between layers to a queued batch with less work, so short requests "
        "never wait for a long batch to finish (NumPy backend; ONNX Runtime cannot yield)",
    )
    p.add_argument(
        "--max-queue", type=v.positive_int, default=d.max_queue, help="queued sequences before requests get 429"
    )
    p.add_argument(
        "--max-queue-tokens",
        type=v.positive_int,
        default=d.max_queue_tokens,
        help="queued tokens per model before requests get 429 (a request holding more: 413); default: what "
        "the engine drains in 80%% of --grace-period, measured at start-up",
    )
    p.add_argument(
        "--max-inputs-per-request",
        "--max-client-batch-size",
        type=v.positive_int,
        default=d.max_inputs_per_request,
        help="inputs one request may carry (split over as many batches as needed); more: 413",
    )
    p.add_argument(
        "--max-body-bytes",
        "--payload-limit",
        type=v.positive_int,
        default=d.max_body_bytes,
        help="request body bytes; more: 413 before parsing",
    )
    p.add_argument(
        "--truncate",
        action=argparse.BooleanOptionalAction,
        default=d.truncate,
        help="truncate over-long inputs to the model's max length and report it (--no-truncate: 413 instead)",
    )
    # No default here: argparse's help would print it, and the key comes from the environment.
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1/*; prefer the env variable OPENHOOD_API_KEY "
        "(a flag shows in `ps`; every option has its OPENHOOD_<OPTION>); an empty key is an error (default: no auth)",
    )
    p.add_argument(
        "--grace-period",
        type=v.non_negative_float,
        default=d.grace_period_s,
        help="seconds to drain on SIGTERM before exiting",
    )
    p.add_argument(
        "--health-timeout",
        type=v.positive_float,
        default=d.health_timeout_s,
        help="seconds the readiness probe may take",
    )
    p.add_argument(
        "--stall-timeout",
        type=v.positive_float,
        default=d.stall_timeout_s,
        help="seconds inside one batch before the worker counts as wedged",
    )
    limits = p.add_argument_group("connection limits", "docs/server.md § Connection limits")
    limits.add_argument(
        "--max-connections",
        type=v.positive_int,
        default=d.max_connections,
        help="open connections; one more gets 503 and is closed at once",
    )
    limits.add_argument(
        "--max-header-bytes", type=v.positive_int, default=d.max_header_bytes, help="request line + headers; more → 431"
    )
    limits.add_argument("--max-headers", type=v.positive_int, default=d.max_headers, help="header count; more → 431")
    limits.add_argument(
        "--max-request-line", type=v.positive_int, default=d.max_request_line, help="request-line bytes; more → 414"
    )
    limits.add_argument(
        "--header-timeout",
        type=v.positive_float,
        default=d.header_timeout_s,
        help="seconds for a request head to arrive (408; an idle new connection is closed)",
    )
    limits.add_argument(
        "--body-timeout",
        type=v.positive_float,
        default=d.body_timeout_s,
        help="seconds for a request body to arrive after its head (408)",
    )
    limits.add_argument(
        "--keep-alive-timeout",
        type=v.positive_int,
        default=d.keep_alive_timeout_s,
        help="seconds an idle keep-alive connection stays open",
    )
    g, gd = (
        p.add_argument_group("generation", "the generate task's scheduler (docs/server.md § Generation)"),
        d.generation,
    )
    g.add_argument(
        "--gen-max-running",
        type=v.positive_int,
        default=gd.max_running,
        help="sequences decoded together (KV-cache slots)",
    )
    g.add_argument(
        "--gen-kv-cache-mb",
        type=v.positive_int,
        default=gd.kv_cache_bytes // 2**20,
        help="KV-cache MiB reserved by running sequences (prompt + max_tokens each); beyond it requests wait",
    )
    g.add_argument(
        "--gen-max-waiting",
        type=v.positive_int,
        default=gd.max_waiting,
        help="sequences waiting for a slot before requests get 429",
    )
    g.add_argument(
        "--gen-prefill-chunk",
        type=v.positive_int,
        default=gd.prefill_chunk,
        help="prompt tokens prefilled per step at most, so a long prompt does not stall running streams",
    )
    g.add_argument(
        "--gen-step-stretch",
        type=v.factor_or_zero,
        default=gd.step_stretch,
        help="while streams decode, a step that also reads prompt tokens may last at most this many "
        "decode steps of the running batch (bounds inter-token P99/P50); 0 = always the whole --gen-prefill-chunk",
    )
    g.add_argument(
        "--gen-max-context",
        type=v.positive_int,
        default=gd.max_context,
        help="prompt + max_tokens of one request (clipped to the model's context); more: 400",
    )
    g.add_argument(
        "--gen-max-tokens", type=v.positive_int, default=gd.max_tokens, help="the largest max_tokens a request may ask"
    )
    g.add_argument(
        "--gen-timeout",
        type=v.positive_float,
        default=gd.timeout_s,
        help="seconds a request may generate; then it ends with finish_reason 'length'",
    )
    p.add_argument(
        "--debug-endpoints",
        action="store_true",
        help="serve GET /debug/memory (tracemalloc site diff, gc counts by type; starts tracemalloc, "
        "which slows the server: docs/soak.md)",
    )
    p.add_argument("--log-level", default=d.log_level, choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--help-env",
        action=EnvTableAction,
        help="print every OPENHOOD_<OPTION> variable as a Markdown table (docs/server.md) and exit",
    )
    p.set_defaults(func=run_serve)
    env_defaults(p, environ)

    b = subparsers.add_parser(
        "buckets",
        help="derive batching length buckets from the length quantiles of a corpus (P50, P80, P95)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    b.add_argument("--corpus", required=True, type=v.existing_file, help='JSONL file of {"text": ...} lines')
    b.add_argument(
        "--model", default=None, type=v.model_dir, help="model folder whose tokenizer counts tokens (default: bundled)"
    )
    b.add_argument("--limit", type=v.positive_int, default=None, help="only the first N texts")
    b.set_defaults(func=run_buckets)


ENV_PREFIX = "OPENHOOD_"
GENERATION_CUT_LEAD_S = 3.0  # with a generate model, running sequences are cut this long before the drain deadline
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")
# What a variable's value must look like, by the option's argparse type (docs table).
VALUE_KINDS = {
    v.port: "TCP port 1-65535",
    v.positive_int: "integer ≥ 1",
    v.non_negative_int: "integer ≥ 0",
    v.positive_float: "number > 0",
    v.non_negative_float: "number ≥ 0",
    v.factor_or_zero: "0 (off) or a number ≥ 1",
    v.int_list: "comma list of integers",
}
NOT_ENV = ("help", "help_env")  # options that are actions, not settings


def env_name(action: argparse.Action) -> str:
    return ENV_PREFIX + action.dest.upper()


def env_table() -> str:
    """Every serve option's variable as a Markdown table, from a parser built without the
    environment (so the defaults are the built-in ones). docs/server.md holds this output;
    tests/deploy/test_env_config.py fails when the two differ."""
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub, environ={})
    parser = sub.choices["serve"]
    rows = ["| variable | flag | default | value |", "|---|---|---|---|"]
    for action in parser._actions:
        if action.dest in NOT_ENV:
            continue
        flags = " / ".join(f"`{f}`" for f in action.option_strings if f.startswith("--") and not f.startswith("--no-"))
        default = action.default
        if action.dest == "api_key":
            kind, default = "the key (read at start-up, never printed; prefer it to the flag)", None
        elif isinstance(action, argparse.BooleanOptionalAction | argparse._StoreTrueAction):
            kind, default = "true / false (also 1 / 0, yes / no)", str(default).lower()
        elif action.choices is not None:
            kind = " \\| ".join(f"`{c}`" for c in action.choices)
        elif isinstance(action, argparse._AppendAction):
            kind = "one `[NAME=]PATH` (the flag repeats for more models)"
        else:
            kind = VALUE_KINDS.get(action.type, "text")  # type: ignore[arg-type]
        if isinstance(default, tuple):
            default = ",".join(map(str, default))
        shown = "—" if default is None else f"`{default}`"
        rows.append(f"| `{env_name(action)}` | {flags} | {shown} | {kind} |")
    return "\n".join(rows) + "\n"


class AppendOverDefault(argparse._AppendAction):
    """``action="append"`` whose flags replace the default instead of adding to it, so
    ``--model`` on the command line wins over ``OPENHOOD_MODEL`` like every other flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        if self.default is not None and getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, None)
        super().__call__(parser, namespace, values, option_string)


class EnvTableAction(argparse.Action):
    """``openhood serve --help-env``: print ``env_table()`` and exit, like ``--help``."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(env_table(), end="")
        parser.exit()


def env_defaults(parser: argparse.ArgumentParser, environ=os.environ) -> None:
    """``OPENHOOD_<OPTION>`` (e.g. ``OPENHOOD_MAX_BATCH_SIZE=64``) replaces an option's default, so
    a container is configured by its environment; a flag on the command line still wins. Values
    go through the option's type when parsed; a value outside its choices is reported by
    ``run_serve`` (as a usage error of ``serve`` alone, not of every command)."""
    problems = []
    for action in parser._actions:
        name = env_name(action)
        value = environ.get(name)
        # The API key is read by config_from_args, never made a default: --help prints defaults.
        if value is None or action.dest in (*NOT_ENV, "api_key"):
            continue
        if isinstance(action, argparse.BooleanOptionalAction | argparse._StoreTrueAction):
            if value.lower() not in (*TRUE, *FALSE):
                problems.append(f"{name} must be true or false, got {value!r}")
            action.default = value.lower() in TRUE
        elif action.choices is not None and value not in action.choices:
            problems.append(f"{name} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
        elif isinstance(action, argparse._AppendAction):
            action.default = [value]  # one value from the environment (OPENHOOD_MODEL=PATH)
        else:
            action.default = value  # a string default is converted by the option's type at parse time
    parser.set_defaults(env_problems=problems)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    buckets = args.buckets
    if isinstance(buckets, str):  # from a model file's [server] table
        buckets = v.int_list(buckets)
    api_key = args.api_key if args.api_key is not None else os.environ.get("OPENHOOD_API_KEY")
    return ServerConfig(
        backend=args.backend,
        precision=args.precision,
        workers=args.workers,
        threads=args.threads,
        wide=args.wide,
        host=args.host,
        port=args.port,
        max_batch_size=args.max_batch_size,
        max_batch_tokens=args.max_batch_tokens,
        max_wait_ms=args.max_wait_ms,
        buckets=tuple(buckets),
        pad_to=args.pad_to,
        priority=args.priority,
        max_age_ms=args.max_age_ms,
        short_lane_tokens=args.short_lane_tokens,
        wide_quiet_ms=args.wide_quiet_ms,
        preempt=args.preempt,
        max_queue=args.max_queue,
        max_queue_tokens=args.max_queue_tokens,
        max_inputs_per_request=args.max_inputs_per_request,
        max_body_bytes=args.max_body_bytes,
        truncate=args.truncate,
        api_key=api_key,
        max_connections=args.max_connections,
        max_header_bytes=args.max_header_bytes,
        max_headers=args.max_headers,
        max_request_line=args.max_request_line,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        keep_alive_timeout_s=args.keep_alive_timeout,
        grace_period_s=args.grace_period,
        health_timeout_s=args.health_timeout,
        stall_timeout_s=args.stall_timeout,
        log_level=args.log_level,
        debug_endpoints=args.debug_endpoints,
        generation=GenerationPolicy(
            max_running=args.gen_max_running,
            kv_cache_bytes=args.gen_kv_cache_mb * 2**20,
            max_waiting=args.gen_max_waiting,
            prefill_chunk=args.gen_prefill_chunk,
            step_stretch=args.gen_step_stretch,
            max_context=args.gen_max_context,
            max_tokens=args.gen_max_tokens,
            timeout_s=args.gen_timeout,
        ),
    )


def model_specs(args: argparse.Namespace) -> tuple[dict, list]:
    """(the model file's [server] settings, the model specs) from --config or the --model flags."""
    from openhood.models import ModelSpec, parse_model_spec, read_model_file

    if args.config and args.model:
        raise ValueError("give either --config or --model, not both")
    if args.config:
        return read_model_file(args.config)
    return {}, [parse_model_spec(m) for m in args.model] if args.model else [ModelSpec()]


def apply_file_settings(args: argparse.Namespace, settings: dict) -> None:
    """The model file's [server] keys (flag names, _ or -) fill in the flags left at their default."""
    from openhood.cli import build_parser

    defaults = vars(build_parser().parse_args(["serve"]))
    for key, value in settings.items():
        dest = key.replace("-", "_")
        if dest not in defaults or dest in ("model", "config", "func", "command"):
            raise ValueError(f"unknown [server] setting {key!r} in the model file")
        if dest == "buckets" and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if getattr(args, dest) == defaults[dest]:  # a flag given on the command line wins
            setattr(args, dest, value)


def load_served_models(config: ServerConfig, specs: list) -> list:
    """Every model (one backend per worker), memory reported per model; fault injection if asked."""
    import logging

    from openhood.engine.kernels.cores import core_budget
    from openhood.models import EngineOptions, load_models
    from openhood.server import planted_leak
    from openhood.server.faults import ENV_VAR, inject_faults, parse_faults

    log = logging.getLogger("openhood.server")
    budget = core_budget()
    cores = budget.cores
    options = EngineOptions(
        backend=config.backend,
        precision=config.precision,
        threads=config.engine_threads(cores),
        workers=config.worker_count(cores),
        wide_threads=config.wide_threads(cores),
    )
    models = load_models(specs, options)  # before any log line: a usage mistake stays one line on stderr
    log.info(
        "cpu: %s; %d workers x %d engine threads, wide engine for lone requests: %s",
        budget.describe(),
        options.workers,
        options.threads,
        f"{options.wide_threads} threads" if options.wide_threads else "off",
        extra={
            "fields": {
                "event": "cpu_layout",
                "message": "cores detected and threads sized",
                "cpu": budget.describe(),
                "cores": cores,
                "affinity": budget.affinity,
                "cgroup_quota": budget.quota,
                "workers": options.workers,
                "engine_threads": options.threads,
                "wide_threads": options.wide_threads,
            }
        },
    )
    for m in models:
        log.info(
            "model %s loaded (task %s, %s, %s, max length %d, %d workers): %.1f MB resident memory added",
            m.name,
            m.task,
            m.info.get("backend"),
            m.info.get("precision"),
            m.max_length,
            m.workers,
            m.memory_bytes / 2**20,
        )
    if planted_leak.enabled():
        log.warning("TEST-ONLY planted memory leak active (%s=1): every embeddings request leaks", planted_leak.ENV_VAR)
    faults = parse_faults(os.environ.get(ENV_VAR))
    if faults:
        log.warning("TEST-ONLY fault injection active: %s", sorted(faults))
        inject_faults(models, faults)
    return models


def run_serve(args: argparse.Namespace) -> int:
    import logging
    import sys

    from openhood.models import ModelNotFoundError, ModelSpecError
    from openhood.process.allocator import apply_malloc_policy
    from openhood.server.logs import configure_logging

    if args.env_problems:
        print(f"openhood serve: error: {args.env_problems[0]}", file=sys.stderr)
        return 2
    try:
        settings, specs = model_specs(args)
        apply_file_settings(args, settings)
        config = config_from_args(args)
        # Before any model is loaded; glibc's default for a server (process/allocator.py).
        malloc_policy = apply_malloc_policy("default")
    except (ValueError, ModelSpecError, argparse.ArgumentTypeError) as exc:
        print(f"openhood serve: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_level)
    try:
        models = load_served_models(config, specs)
    except (ModelNotFoundError, ModelSpecError) as exc:
        print(f"openhood serve: error: {exc}", file=sys.stderr)  # the one line a usage mistake gets
        return 2
    logging.getLogger("openhood.server").info("malloc policy: %s", malloc_policy)
    return serve(config, models)


def serve(config: ServerConfig, models: list) -> int:
    """Run the server on ``models`` until a signal drains it; 0 after a clean drain."""
    import logging

    import uvicorn

    from openhood.server.app import create_app
    from openhood.server.lifecycle import DrainingServer, Lifecycle
    from openhood.server.limits import limited_protocol
    from openhood.server.tracing import make_tracer

    log = logging.getLogger("openhood.server")
    tracer, provider = make_tracer()
    lifecycle = Lifecycle()
    app = create_app(config, models, tracer=tracer, lifecycle=lifecycle)
    state = app.state.openhood
    log.info("auth: %s", "on" if config.api_key else "off")  # whether, never what
    for rt in state.runtimes.values():
        log.info(
            "serving %s (%s) on http://%s:%d: buckets=%s, workers=%d",
            rt.model.name,
            rt.model.task,
            config.host,
            config.port,
            rt.buckets,
            rt.model.workers,
        )
    log.info(
        "batching: max_batch_size=%d, max_batch_tokens=%s, max_wait_ms=%g, priority=%s",
        config.max_batch_size,
        config.max_batch_tokens or "calibrated at start-up",
        config.max_wait_ms,
        config.priority,
    )
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        loop="uvloop",
        http=limited_protocol(config, on_refused=lambda reason: state.metrics.connections_refused.labels(reason).inc()),
        timeout_keep_alive=config.keep_alive_timeout_s,
        lifespan="on",
        access_log=False,
        log_config=None,  # configure_logging already set JSON lines for uvicorn's loggers
        log_level=config.log_level,
        timeout_graceful_shutdown=max(1, int(config.grace_period_s)),
    )
    # Generation streams are cut (finish_reason "length") rather than refused: leave room for a step.
    lead = min(GENERATION_CUT_LEAD_S, config.grace_period_s / 4) if "generate" in state.tasks else None
    server = DrainingServer(uv_config, lifecycle, config.grace_period_s, state.stop, cut_lead_s=lead)
    server.run()
    state.close()  # release the engines' thread pools and weights only after the workers stopped
    if provider is not None:
        provider.shutdown()  # flush spans still buffered for the OTLP exporter
    if not server.started:
        return 1  # e.g. the port was taken: uvicorn logged why
    log.info("exited cleanly")
    return 0


def run_buckets(args: argparse.Namespace) -> int:
    import numpy as np

    from openhood.corpus import read_texts
    from openhood.engine.models.bert import read_config
    from openhood.models import resolve_model_dir
    from openhood.scheduler import LengthBuckets
    from openhood.tokenizer import Tokenizer

    folder = resolve_model_dir(args.model)
    tokenizer = Tokenizer.from_pretrained(folder)
    texts = read_texts(args.corpus, limit=args.limit or None)
    lengths = np.asarray(tokenizer.encode_batch(texts, max_length=None).lengths)
    max_length = read_config(folder).max_length  # the same clamp the served model uses
    buckets = LengthBuckets.from_lengths(lengths, max_length)
    pct = {p: float(np.percentile(lengths, p)) for p in (50, 80, 90, 95, 99)}
    print(f"{len(lengths)} texts; token length percentiles: " + ", ".join(f"P{p}={v:.0f}" for p, v in pct.items()))
    print(f"max length {max_length}; derived buckets: --buckets {buckets}")
    shares = buckets.share_per_bucket(lengths)
    for bound, share in zip(buckets.bounds, shares, strict=True):
        print(f"  <= {bound:4d}: {share:6.1%}")
    print(f"first two buckets hold {sum(shares[:2]):.1%} of the texts")
    return 0
