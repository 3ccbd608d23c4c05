"""``OPENHOOD_<OPTION>`` configures ``openhood serve`` (containers), and every such variable the
Dockerfile and the manifests set is an option the server really has."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from openhood.cli import build_parser, main
from openhood.cli import validate as v
from openhood.cli.serve import (
    ENV_PREFIX,
    NOT_ENV,
    apply_file_settings,
    config_from_args,
    env_names,
    env_table,
    model_specs,
)
from openhood.cli.serve_options import SERVE_OPTIONS

from .kustomize_lite import render

ROOT = Path(__file__).resolve().parents[2]


def serve_parser() -> argparse.ArgumentParser:
    return next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]


def serve_env_names() -> set[str]:
    return {n for a in serve_parser()._actions if a.dest not in NOT_ENV for n in env_names(a)}


def env_and_flag_values(action: argparse.Action) -> tuple[str, list[str], object]:
    """(the variable's value, the command-line words, what the flag must leave in args) for one option."""
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction | argparse._StoreTrueAction):
        return "false", [flag], True
    if action.choices is not None:
        env, wins = list(action.choices)[:2]
        return str(env), [flag, str(wins)], wins
    if isinstance(action, argparse._AppendAction):
        return "env=/nowhere", [flag, "flag=/somewhere"], ["flag=/somewhere"]
    if action.type is v.int_list:
        return "16,32", [flag, "64"], (64,)
    if action.type in (v.port, v.positive_int, v.non_negative_int):
        return "7", [flag, "9"], 9
    if action.type in (v.positive_float, v.non_negative_float, v.factor_or_zero):
        return "7.5", [flag, "9.5"], 9.5
    assert action.type is None, (flag, action.type)  # a new kind of option: teach this test its values
    return "from-env", [flag, "from-flag"], "from-flag"


def test_every_flag_wins_over_its_variable(monkeypatch):
    actions = [a for a in serve_parser()._actions if a.dest not in NOT_ENV]
    assert len(actions) >= 30
    for action in actions:
        env, words, want = env_and_flag_values(action)
        monkeypatch.setenv(ENV_PREFIX + action.dest.upper(), env)
        args = build_parser().parse_args(["serve", *words])
        got = config_from_args(args).api_key if action.dest == "api_key" else getattr(args, action.dest)
        assert got == want, (action.dest, got, want)
        monkeypatch.delenv(ENV_PREFIX + action.dest.upper())


def test_every_alias_has_its_variable_and_two_disagreeing_ones_are_refused(monkeypatch, capsys):
    aliased = [a for a in serve_parser()._actions if len(env_names(a)) > 1]
    assert {a.dest for a in aliased} >= {"max_inputs_per_request", "max_body_bytes"}
    monkeypatch.setenv("OPENHOOD_MAX_CLIENT_BATCH_SIZE", "7")  # TEI's name: silently ignored before
    assert config_from_args(build_parser().parse_args(["serve"])).max_inputs_per_request == 7
    monkeypatch.setenv("OPENHOOD_MAX_INPUTS_PER_REQUEST", "8")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OPENHOOD_MAX_CLIENT_BATCH_SIZE" in err[0] and "different values" in err[0]


def test_the_option_table_is_the_parser():
    # One row per option: the parser is built from SERVE_OPTIONS, defaults from ServerConfig.
    parser_dests = [a.dest for a in serve_parser()._actions if a.dest not in ("help",)]
    assert parser_dests == [o.dest if o.kind != "help_env" else "help_env" for o in SERVE_OPTIONS]


def test_store_true_options_read_false_from_the_environment(monkeypatch):
    for value, want in (("false", False), ("0", False), ("true", True), ("YES", True)):
        monkeypatch.setenv("OPENHOOD_DEBUG_ENDPOINTS", value)
        assert build_parser().parse_args(["serve"]).debug_endpoints is want


def test_model_file_server_table_sets_what_no_flag_set_over_a_variable(monkeypatch, tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text('[server]\nport = 9003\nmax-wait-ms = 5.0\n\n[[models]]\nname = "m"\n')
    monkeypatch.setenv("OPENHOOD_PORT", "9001")
    monkeypatch.setenv("OPENHOOD_MAX_WAIT_MS", "4")
    monkeypatch.setenv("OPENHOOD_MAX_QUEUE", "77")
    args = build_parser().parse_args(["serve", "--config", str(toml), "--max-wait-ms", "6"])
    settings, _ = model_specs(args)
    apply_file_settings(args, settings)
    cfg = config_from_args(args)
    assert (cfg.port, cfg.max_wait_ms, cfg.max_queue) == (9003, 6.0, 77)  # file over variable, flag over file


def test_docs_env_table_is_the_parsers(capsys):
    """docs/server.md's table is generated (scripts/sync_env_table.py); stale → this fails."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync_env_table.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    table = env_table()
    assert {f"`{name}`" for name in serve_env_names()} <= set(re.findall(r"`OPENHOOD_[A-Z_]+`", table))
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--help-env"])
    assert exc.value.code == 0 and capsys.readouterr().out == table


def test_env_table_shows_builtin_defaults_whatever_the_environment(monkeypatch):
    before = env_table()
    monkeypatch.setenv("OPENHOOD_MAX_BATCH_SIZE", "64")
    assert env_table() == before and "| `OPENHOOD_MAX_BATCH_SIZE` | `--max-batch-size` | `32` |" in before


def test_environment_sets_defaults_and_flags_still_win(monkeypatch):
    for name, value in {
        "OPENHOOD_PORT": "9001",
        "OPENHOOD_HOST": "0.0.0.0",
        "OPENHOOD_WORKERS": "4",
        "OPENHOOD_TRUNCATE": "false",
        "OPENHOOD_GRACE_PERIOD": "12.5",
        "OPENHOOD_PRIORITY": "oldest",
        "OPENHOOD_API_KEY": "k",
    }.items():
        monkeypatch.setenv(name, value)
    cfg = config_from_args(build_parser().parse_args(["serve"]))
    assert (cfg.port, cfg.host, cfg.workers, cfg.truncate, cfg.grace_period_s, cfg.priority, cfg.api_key) == (
        9001,
        "0.0.0.0",
        4,
        False,
        12.5,
        "oldest",
        "k",
    )
    assert config_from_args(build_parser().parse_args(["serve", "--port", "9002", "--truncate"])).port == 9002


def test_bad_environment_value_is_a_usage_error_of_serve_only(monkeypatch, capsys):
    monkeypatch.setenv("OPENHOOD_PRIORITY", "loudest")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OPENHOOD_PRIORITY must be one of" in err
    assert build_parser().parse_args(["tokenize", "x"]).command == "tokenize"  # other commands unaffected


def test_deploy_files_only_set_real_options():
    names = serve_env_names()
    used = set(re.findall(r"\b(OPENHOOD_[A-Z_]+)", (ROOT / "deploy" / "Dockerfile").read_text()))
    for doc in render(ROOT / "deploy" / "k8s" / "overlays" / "example"):
        for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            used |= {e["name"] for e in c.get("env", []) if e["name"].startswith(ENV_PREFIX)}
    assert {"OPENHOOD_HOST", "OPENHOOD_PORT", "OPENHOOD_API_KEY"} <= used
    assert used <= names, used - names
