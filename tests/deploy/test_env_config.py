"""``OPENHOOD_<OPTION>`` configures ``openhood serve`` (containers), and every such variable the
Dockerfile and the manifests set is an option the server really has."""

from __future__ import annotations

import re
from pathlib import Path

from openhood.cli import build_parser, main
from openhood.cli.serve import ENV_PREFIX, config_from_args

from .kustomize_lite import render

ROOT = Path(__file__).resolve().parents[2]


def serve_env_names() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
    return {ENV_PREFIX + a.dest.upper() for a in sub._actions if a.dest not in ("help", "func", "env_problems")}


def test_environment_sets_defaults_and_flags_still_win(monkeypatch):
    for name, value in {"OPENHOOD_PORT": "9001", "OPENHOOD_HOST": "0.0.0.0", "OPENHOOD_WORKERS": "4",
                        "OPENHOOD_TRUNCATE": "false", "OPENHOOD_GRACE_PERIOD": "12.5", "OPENHOOD_PRIORITY": "oldest",
                        "OPENHOOD_API_KEY": "k"}.items():
        monkeypatch.setenv(name, value)
    cfg = config_from_args(build_parser().parse_args(["serve"]))
    assert (cfg.port, cfg.host, cfg.workers, cfg.truncate, cfg.grace_period_s, cfg.priority, cfg.api_key) == \
        (9001, "0.0.0.0", 4, False, 12.5, "oldest", "k")
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
