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
from openhood.cli.serve_options import add_serve_options, config_fields
from openhood.scheduler.policy import GenerationPolicy
from openhood.server.config import ServerConfig


def register(subparsers, environ=os.environ) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve one or more models over HTTP (OpenAI-compatible embeddings and completions) with batching",
        description="Serve POST /v1/embeddings, /v1/chat/completions and /v1/completions (OpenAI-compatible; "
        "a .gguf model is served for generation), /v1/models, /health/live, /health/ready, /metrics and /stats "
        "for one or more models, routed by the request's 'model'. See docs/server.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_serve_options(p, {"append": AppendOverDefault, "help_env": EnvTableAction})
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


def env_names(action: argparse.Action) -> list[str]:
    """``OPENHOOD_<FLAG>`` for each long flag of an option, aliases included, the main one first."""
    names = [ENV_PREFIX + f[2:].upper().replace("-", "_") for f in action.option_strings if f.startswith("--")]
    return [n for n in dict.fromkeys(names) if not n.startswith(ENV_PREFIX + "NO_")]


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
        variables = " / ".join(f"`{n}`" for n in env_names(action))
        rows.append(f"| {variables} | {flags} | {shown} | {kind} |")
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
        if action.dest in (*NOT_ENV, "api_key"):  # the key is read by config_from_args: --help prints defaults
            continue
        given = {n: environ[n] for n in env_names(action) if n in environ}
        if len(set(given.values())) > 1:
            problems.append(f"{' and '.join(given)} name the same option with different values")
            continue
        if not given:
            continue
        name, value = next(iter(given.items()))
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
    fields, generation = config_fields(args)
    fields["buckets"] = tuple(buckets)
    return ServerConfig(**fields, api_key=api_key, generation=GenerationPolicy(**generation))


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
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub, environ={})
    actions = {a.dest: a for a in sub.choices["serve"]._actions}
    for key, value in settings.items():
        dest = key.replace("-", "_")
        if dest not in defaults or dest in ("model", "config", "func", "command"):
            raise ValueError(f"unknown [server] setting {key!r} in the model file")
        if dest == "buckets" and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if getattr(args, dest) == defaults[dest]:  # a flag given on the command line wins
            setattr(args, dest, file_value(key, value, actions[dest]))


def file_value(key: str, value, action: argparse.Action):
    """A [server] value checked as its flag's would be (the option's type, its choices, true/false
    for a switch), so ``workers = "two"`` is a usage error, not a traceback at start-up."""
    switch = isinstance(action, argparse.BooleanOptionalAction | argparse._StoreTrueAction)
    try:
        if switch != isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"expected {'true or false' if switch else 'a string or a number'}, got {value!r}")
        if action.type is not None:
            value = action.type(str(value))  # type: ignore[operator]
        if action.choices is not None and value not in action.choices:
            raise ValueError(f"expected one of {', '.join(map(str, action.choices))}, got {value!r}")
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ValueError(f"[server] {key} in the model file: {exc}") from None
    return value


def load_served_models(config: ServerConfig, specs: list) -> list:
    """Every model (one backend per worker), memory reported per model; fault injection if asked."""
    import logging

    from openhood.engine.kernels import isa
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
        decoder_weights=config.decoder_weights,
        threads=config.engine_threads(cores),
        workers=config.worker_count(cores),
        wide_threads=config.wide_threads(cores),
        batch_rows=config.max_batch_size,
    )
    models = load_models(specs, options)  # before any log line: a usage mistake stays one line on stderr
    log.info(
        "cpu: %s; kernels at %s; %d workers x %d engine threads, wide engine for lone requests: %s",
        budget.describe(),
        isa.level().label,
        options.workers,
        options.threads,
        f"{options.wide_threads} threads" if options.wide_threads else "off",
        extra={
            "fields": {
                "event": "cpu_layout",
                "message": "cores detected and threads sized",
                "cpu": budget.describe(),
                "isa": isa.describe(),
                "kernels": isa.level().label,
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
        log.warning("TEST-ONLY planted memory leak active (%s=1): every embedding batch leaks", planted_leak.ENV_VAR)
        planted_leak.install(models)
    faults = parse_faults(os.environ.get(ENV_VAR))
    if faults:
        log.warning("TEST-ONLY fault injection active: %s", sorted(faults))
        inject_faults(models, faults)
    return models


def run_serve(args: argparse.Namespace) -> int:
    import logging
    import sys

    from openhood.formats.errors import ModelFileError
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
    except (ModelNotFoundError, ModelSpecError, ModelFileError) as exc:
        print(f"openhood serve: error: {exc}", file=sys.stderr)  # the one line a usage mistake gets
        return 2
    logging.getLogger("openhood.server").info("malloc policy: %s", malloc_policy)
    return serve(config, models)


def serve(config: ServerConfig, models: list) -> int:
    """Run the server on ``models`` until a signal drains it; 0 after a clean drain."""
    import logging
    import sys

    import uvicorn

    from openhood.models.tasks import Task
    from openhood.scheduler.batcher import BatchSettingsError
    from openhood.server.app import create_app
    from openhood.server.lifecycle import DrainingServer, Lifecycle
    from openhood.server.limits import limited_protocol
    from openhood.server.tracing import make_tracer

    log = logging.getLogger("openhood.server")
    tracer, provider = make_tracer()
    lifecycle = Lifecycle()
    try:
        app = create_app(config, models, tracer=tracer, lifecycle=lifecycle)
    except BatchSettingsError as exc:  # a flag that cannot serve a loaded model (--max-batch-tokens)
        for m in models:
            m.close()
        print(f"openhood serve: error: {exc}", file=sys.stderr)
        return 2
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
    lead = min(GENERATION_CUT_LEAD_S, config.grace_period_s / 4) if Task.GENERATE in state.tasks else None
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
    from openhood.tokenizer import WordPieceTokenizer

    folder = resolve_model_dir(args.model)
    tokenizer = WordPieceTokenizer.from_pretrained(folder)
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
