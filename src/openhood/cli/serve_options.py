"""Every ``openhood serve`` option in one table: its flags, the config field it sets, its type and help.

``register`` builds the argparse parser from ``SERVE_OPTIONS``, ``config_fields`` turns parsed
arguments into ``ServerConfig`` keyword arguments, and the environment-variable table
(``OPENHOOD_<FLAG>``, docs/server.md) is generated from the same rows, so a flag, its default,
its variable and its documentation cannot drift apart. Defaults are never written here: each
row names a ``ServerConfig`` field (``generation.*`` for the generate scheduler's policy) and
the default is read from a default ``ServerConfig``. Every long flag of a row has a variable,
aliases included (``--max-client-batch-size`` → ``OPENHOOD_MAX_CLIENT_BATCH_SIZE``). The
trade-off: an option that needs more than a type and choices (``--api-key``: never a default)
says so with its ``kind``, and the builder knows the four kinds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from openhood.cli import validate as v
from openhood.scheduler.policy import PRIORITIES
from openhood.server.config import ServerConfig

GROUPS = {
    "connection limits": "docs/server.md § Connection limits",
    "generation": "the generate task's scheduler (docs/server.md § Generation)",
}


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    field: str | None = None  # the ServerConfig field it sets ("generation.x": the GenerationPolicy's)
    type: Any = None
    choices: tuple[str, ...] | None = None
    kind: str = "value"  # value | bool (--x/--no-x) | flag (store_true) | append | help_env
    metavar: str | None = None
    group: str | None = None
    scale: int = 1  # the flag's unit in the field's (MiB → bytes)

    @property
    def dest(self) -> str:
        return self.flags[0].lstrip("-").replace("-", "_")

    def default(self, config: ServerConfig) -> Any:
        if self.field is None:
            return None
        value: Any = config
        for part in self.field.split("."):
            value = getattr(value, part)
        return value // self.scale if self.scale != 1 and value is not None else value


SERVE_OPTIONS: tuple[Option, ...] = (
    Option(
        flags=("--model",),
        kind="append",
        metavar="[NAME=]PATH",
        help="a model folder (or a decoder's .gguf file) to serve, optionally named (repeatable; the first is the default of its task; default: the bundled all-MiniLM-L6-v2)",
    ),
    Option(
        flags=("--config",),
        metavar="FILE.toml",
        help="serve the [[models]] of this TOML file (name, path, task, backend, precision, buckets); its [server] table sets any flag left at its default (docs/server.md)",
    ),
    Option(
        flags=("--backend",),
        field="backend",
        choices=("auto", "numpy", "onnxruntime"),
        help="the engine behind every model (a model file may choose per model); auto: both timed on this "
        "machine at first start, lone requests and batches each served by the faster (cached; docs/design.md)",
    ),
    Option(
        flags=("--precision",),
        field="precision",
        help="passed to the engine (fp32; others when the backend offers them)",
    ),
    Option(
        flags=("--workers",),
        field="workers",
        type=v.positive_int,
        help="inference worker threads, each with its own engine (default: 2 where there are 2+ cores); with more than one, a short request can start while a long batch runs (docs/benchmarks.md)",
    ),
    Option(
        flags=("--threads",),
        field="threads",
        type=v.positive_int,
        help="intra-op threads per engine (default: the cores divided by --workers)",
    ),
    Option(
        flags=("--wide",),
        field="wide",
        kind="bool",
        help="run a lone request on an idle server on an extra engine with every core's threads (when the workers' engines have fewer); --no-wide: always the workers' engines",
    ),
    Option(flags=("--host",), field="host", help="the engine behind every model (a model file may choose per model)"),
    Option(
        flags=("--port",),
        field="port",
        type=v.port,
        help="the engine behind every model (a model file may choose per model)",
    ),
    Option(flags=("--max-batch-size",), field="max_batch_size", type=v.positive_int, help="rows per engine call"),
    Option(
        flags=("--max-batch-tokens",),
        field="max_batch_tokens",
        type=v.positive_int,
        help="padded tokens (B x T) per engine call (default: calibrated at start-up so one batch costs at most 2x a lone short request on this machine; docs/server.md)",
    ),
    Option(
        flags=("--max-wait-ms",),
        field="max_wait_ms",
        type=v.non_negative_float,
        help="how long the oldest request may wait for batch-mates",
    ),
    Option(
        flags=("--buckets",),
        field="buckets",
        type=v.int_list,
        help="comma list of padded lengths (the model max is always added); derive yours with `openhood buckets --corpus`",
    ),
    Option(
        flags=("--pad-to",),
        field="pad_to",
        choices=("longest", "bucket"),
        help="pad a batch to its longest sequence or to its bucket's bound",
    ),
    Option(
        flags=("--priority",),
        field="priority",
        choices=PRIORITIES,
        help="which ready bucket runs first: the shortest (unless another waited --max-age-ms) or the oldest",
    ),
    Option(
        flags=("--max-age-ms",),
        field="max_age_ms",
        type=v.non_negative_float,
        help="with --priority shortest: a request this old goes first",
    ),
    Option(
        flags=("--short-lane-tokens",),
        field="short_lane_tokens",
        type=v.non_negative_int,
        help="with 2+ workers that cannot preempt (ONNX Runtime, --no-preempt), worker 0 only runs buckets up to this many tokens, so a short request never waits behind long batches on every worker (0 = off)",
    ),
    Option(
        flags=("--wide-quiet-ms",),
        field="wide_quiet_ms",
        type=v.non_negative_float,
        help="with --wide: a lone request runs on every core only after this long without overlapping requests (sequential traffic); 0 = whenever the server is idle",
    ),
    Option(
        flags=("--preempt",),
        field="preempt",
        kind="bool",
        help="a running batch yields between layers to a queued batch with less work, so short requests never wait for a long batch to finish (NumPy backend; ONNX Runtime cannot yield)",
    ),
    Option(
        flags=("--max-queue",), field="max_queue", type=v.positive_int, help="queued sequences before requests get 429"
    ),
    Option(
        flags=("--max-queue-tokens",),
        field="max_queue_tokens",
        type=v.positive_int,
        help="queued tokens per model before requests get 429 (a request holding more: 413); default: what the engine drains in 80%% of --grace-period, measured at start-up",
    ),
    Option(
        flags=("--max-inputs-per-request", "--max-client-batch-size"),
        field="max_inputs_per_request",
        type=v.positive_int,
        help="inputs one request may carry (split over as many batches as needed); more: 413",
    ),
    Option(
        flags=("--max-body-bytes", "--payload-limit"),
        field="max_body_bytes",
        type=v.positive_int,
        help="request body bytes; more: 413 before parsing",
    ),
    Option(
        flags=("--image-memory-mb",),
        field="image_memory_mb",
        type=v.positive_int,
        help="MiB of decoded pixels for all in-flight images together (each reserves its decode's peak, read from its header): beyond it images wait, then 503; one image needing more: 413",
    ),
    Option(
        flags=("--truncate",),
        field="truncate",
        kind="bool",
        help="truncate over-long inputs to the model's max length and report it (--no-truncate: 413 instead)",
    ),
    Option(
        flags=("--api-key",),
        help="require 'Authorization: Bearer KEY' on /v1/*; prefer the env variable OPENHOOD_API_KEY (a flag shows in `ps`; every option has its OPENHOOD_<OPTION>); an empty key is an error (default: no auth)",
    ),
    Option(
        flags=("--grace-period",),
        field="grace_period_s",
        type=v.non_negative_float,
        help="seconds to drain on SIGTERM before exiting",
    ),
    Option(
        flags=("--health-timeout",),
        field="health_timeout_s",
        type=v.positive_float,
        help="seconds the readiness probe may take",
    ),
    Option(
        flags=("--stall-timeout",),
        field="stall_timeout_s",
        type=v.positive_float,
        help="seconds inside one batch before the worker counts as wedged",
    ),
    Option(
        flags=("--max-connections",),
        field="max_connections",
        type=v.positive_int,
        group="connection limits",
        help="open connections; one more gets 503 and is closed at once",
    ),
    Option(
        flags=("--max-header-bytes",),
        field="max_header_bytes",
        type=v.positive_int,
        group="connection limits",
        help="request line + headers; more → 431",
    ),
    Option(
        flags=("--max-headers",),
        field="max_headers",
        type=v.positive_int,
        group="connection limits",
        help="header count; more → 431",
    ),
    Option(
        flags=("--max-request-line",),
        field="max_request_line",
        type=v.positive_int,
        group="connection limits",
        help="request-line bytes; more → 414",
    ),
    Option(
        flags=("--header-timeout",),
        field="header_timeout_s",
        type=v.positive_float,
        group="connection limits",
        help="seconds for a request head to arrive (408; an idle new connection is closed)",
    ),
    Option(
        flags=("--body-timeout",),
        field="body_timeout_s",
        type=v.positive_float,
        group="connection limits",
        help="seconds for a request body to arrive after its head (408)",
    ),
    Option(
        flags=("--keep-alive-timeout",),
        field="keep_alive_timeout_s",
        type=v.positive_int,
        group="connection limits",
        help="seconds an idle keep-alive connection stays open",
    ),
    Option(
        flags=("--gen-weights",),
        field="decoder_weights",
        choices=("quantized", "float32"),
        group="generation",
        help="a decoder's weights: the GGUF's quantized blocks (packed kernels, ~1/5 of the memory) or float32 dequantized at load (BLAS)",
    ),
    Option(
        flags=("--gen-max-running",),
        field="generation.max_running",
        type=v.positive_int,
        group="generation",
        help="sequences decoded together (KV-cache slots)",
    ),
    Option(
        flags=("--gen-kv-cache-mb",),
        field="generation.kv_cache_bytes",
        scale=2**20,
        type=v.positive_int,
        group="generation",
        help="KV-cache MiB reserved by running sequences (prompt + max_tokens each); beyond it requests wait",
    ),
    Option(
        flags=("--gen-max-waiting",),
        field="generation.max_waiting",
        type=v.positive_int,
        group="generation",
        help="sequences waiting for a slot before requests get 429",
    ),
    Option(
        flags=("--gen-prefill-chunk",),
        field="generation.prefill_chunk",
        type=v.positive_int,
        group="generation",
        help="prompt tokens prefilled per step at most, so a long prompt does not stall running streams",
    ),
    Option(
        flags=("--gen-step-stretch",),
        field="generation.step_stretch",
        type=v.factor_or_zero,
        group="generation",
        help="while streams decode, a step that also reads prompt tokens may last at most this many decode steps of the running batch (bounds inter-token P99/P50); 0 = always the whole --gen-prefill-chunk",
    ),
    Option(
        flags=("--gen-max-context",),
        field="generation.max_context",
        type=v.positive_int,
        group="generation",
        help="prompt + max_tokens of one request (clipped to the model's context); more: 400",
    ),
    Option(
        flags=("--gen-max-tokens",),
        field="generation.max_tokens",
        type=v.positive_int,
        group="generation",
        help="the largest max_tokens a request may ask",
    ),
    Option(
        flags=("--gen-prefix-cache",),
        field="generation.prefix_cache",
        kind="bool",
        group="generation",
        help="start a prompt from the longest prefix already in a KV slot (a shared system prompt, a growing chat)",
    ),
    Option(
        flags=("--gen-timeout",),
        field="generation.timeout_s",
        type=v.positive_float,
        group="generation",
        help="seconds a request may generate; then it ends with finish_reason 'length'",
    ),
    Option(
        flags=("--debug-endpoints",),
        field="debug_endpoints",
        kind="flag",
        help="serve GET /debug/memory (tracemalloc site diff, gc counts by type; starts tracemalloc, which slows the server: docs/soak.md)",
    ),
    Option(
        flags=("--log-level",),
        field="log_level",
        choices=("debug", "info", "warning", "error"),
        help="the engine behind every model (a model file may choose per model)",
    ),
    Option(
        flags=("--help-env",),
        kind="help_env",
        help="print every OPENHOOD_<OPTION> variable as a Markdown table (docs/server.md) and exit",
    ),
)


def add_serve_options(parser: argparse.ArgumentParser, actions: dict[str, type[argparse.Action]]) -> None:
    """Every row of ``SERVE_OPTIONS`` as an argument of ``parser`` (``actions``: the classes for
    the ``append`` and ``help_env`` kinds, which live with the command)."""
    config = ServerConfig()
    groups = {name: parser.add_argument_group(name, about) for name, about in GROUPS.items()}
    for opt in SERVE_OPTIONS:
        target = groups[opt.group] if opt.group else parser
        kw: dict[str, Any] = {"help": opt.help}
        if opt.kind == "help_env":
            target.add_argument(*opt.flags, action=actions["help_env"], **kw)
            continue
        kw["default"] = opt.default(config)
        if opt.kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif opt.kind == "flag":
            kw["action"] = "store_true"
        elif opt.kind == "append":
            kw["action"] = actions["append"]
        if opt.type is not None:
            kw["type"] = opt.type
        if opt.choices is not None:
            kw["choices"] = opt.choices
        if opt.metavar is not None:
            kw["metavar"] = opt.metavar
        target.add_argument(*opt.flags, **kw)


def config_fields(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``ServerConfig`` keyword arguments, ``GenerationPolicy`` keyword arguments) from parsed
    arguments, for every row that names a field."""
    top: dict[str, Any] = {}
    generation: dict[str, Any] = {}
    for opt in SERVE_OPTIONS:
        if opt.field is None:
            continue
        value = getattr(args, opt.dest)
        if opt.scale != 1 and value is not None:
            value = value * opt.scale
        if opt.field.startswith("generation."):
            generation[opt.field.split(".", 1)[1]] = value
        else:
            top[opt.field] = value
    return top, generation
