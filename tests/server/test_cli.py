"""`openhood serve` argument handling and `openhood buckets` on a generated corpus."""

from __future__ import annotations

import argparse
import json

import pytest

from openhood.cli import build_parser, main
from openhood.cli.serve import config_from_args
from openhood.server.config import DEFAULT_BUCKETS, ServerConfig


def test_serve_defaults_match_server_config(monkeypatch):
    monkeypatch.delenv("OPENHOOD_API_KEY", raising=False)
    cfg = config_from_args(build_parser().parse_args(["serve"]))
    assert cfg == ServerConfig() and cfg.buckets == DEFAULT_BUCKETS
    assert (cfg.host, cfg.port, cfg.grace_period_s, cfg.truncate, cfg.api_key) == ("127.0.0.1", 8000, 30.0, True, None)


def test_serve_flags_and_env_key(monkeypatch):
    monkeypatch.setenv("OPENHOOD_API_KEY", "from-env")
    args = build_parser().parse_args(
        [
            "serve",
            "--no-truncate",
            "--buckets",
            "32,64",
            "--max-wait-ms",
            "2.5",
            "--pad-to",
            "bucket",
            "--max-queue",
            "7",
        ]
    )
    cfg = config_from_args(args)
    assert cfg.api_key == "from-env" and cfg.truncate is False and cfg.buckets == (32, 64)
    assert cfg.max_wait_ms == 2.5 and cfg.pad_to == "bucket" and cfg.max_queue == 7
    with pytest.raises(SystemExit):
        config_from_args(build_parser().parse_args(["serve", "--buckets", "32,big"]))
    with pytest.raises(ValueError, match="max_queue"):
        ServerConfig(max_queue=0)


def test_serve_threads_flag():
    assert config_from_args(build_parser().parse_args(["serve"])).threads is None
    assert config_from_args(build_parser().parse_args(["serve", "--threads", "1"])).threads == 1
    with pytest.raises(ValueError, match="threads"):
        ServerConfig(threads=0)


def test_serve_workers_and_priority_flags_and_how_cores_are_shared():
    default = config_from_args(build_parser().parse_args(["serve"]))
    assert default.workers is None and default.priority == "shortest" and default.short_lane_tokens == 80
    assert config_from_args(build_parser().parse_args(["serve", "--short-lane-tokens", "0"])).short_lane_tokens == 0
    assert default.worker_count(2) == 2 and default.engine_threads(2) == 1
    assert default.worker_count(1) == 1 and default.engine_threads(1) == 1
    assert default.worker_count(8) == 2 and default.engine_threads(8) == 4
    cfg = config_from_args(
        build_parser().parse_args(["serve", "--workers", "3", "--priority", "oldest", "--max-age-ms", "50"])
    )
    assert (cfg.workers, cfg.priority, cfg.max_age_ms) == (3, "oldest", 50)
    assert cfg.engine_threads(2) == 1 and cfg.engine_threads(12) == 4
    assert ServerConfig(workers=1, threads=2).engine_threads(2) == 2
    for bad, match in (
        ({"workers": 0}, "workers"),
        ({"short_lane_tokens": -1}, "short_lane_tokens"),
        ({"priority": "fifo"}, "priority"),
        ({"max_age_ms": -1}, "max_age_ms"),
    ):
        with pytest.raises(ValueError, match=match):
            ServerConfig(**bad)


def test_buckets_command_derives_r2_buckets(tmp_path, capsys):
    # 50% ~6 words, 30% ~25 words, 15% ~60 words, 5% long: like short-query traffic.
    texts = (
        ["alpha beta gamma delta epsilon zeta"] * 50 + ["word " * 25] * 30 + ["token " * 60] * 15 + ["long " * 400] * 5
    )
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in texts))
    assert main(["buckets", "--corpus", str(corpus)]) == 0
    out = capsys.readouterr().out
    from openhood.models import default_model_dir
    from openhood.scheduler import LengthBuckets
    from openhood.tokenizer import WordPieceTokenizer

    lengths = WordPieceTokenizer.from_pretrained(default_model_dir()).encode_batch(texts).lengths
    expected = LengthBuckets.from_lengths(lengths, 256)
    assert f"--buckets {expected}\n" in out and expected.bounds[-1] == 256
    share = float(out.split("first two buckets hold ")[1].split("%")[0])
    assert share >= 75.0


def test_batching_defaults_live_in_one_place():
    from openhood.scheduler import BatchPolicy

    assert ServerConfig().batch_policy() == BatchPolicy()  # config, flags and batcher share them


def test_serve_model_flags_and_usage_errors(tmp_path, capsys):
    from openhood.cli.serve import model_specs
    from openhood.models import ModelSpec

    args = build_parser().parse_args(["serve", "--model", "a=/x/a", "--model", "/x/b"])
    assert model_specs(args) == ({}, [ModelSpec(name="a", path="/x/a"), ModelSpec(path="/x/b")])
    assert model_specs(build_parser().parse_args(["serve"])) == ({}, [ModelSpec()])  # the bundled default
    toml = tmp_path / "m.toml"
    toml.write_text('[[models]]\nname = "m"\n')
    for argv, needle in (
        (["--model", "=nothing"], "NAME=PATH"),
        (["--model", "a=/x", "--config", str(toml)], "not both"),
        (["--model", str(tmp_path / "missing")], "does not exist"),
        (["--config", str(tmp_path / "none.toml")], "cannot read"),
    ):
        assert main(["serve", *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_tei_names_of_the_request_limits():
    args = build_parser().parse_args(["serve", "--max-client-batch-size", "12", "--payload-limit", "4096"])
    cfg = config_from_args(args)
    assert (cfg.max_inputs_per_request, cfg.max_body_bytes) == (12, 4096)
    assert ServerConfig().max_inputs_per_request == 1024 and ServerConfig().max_body_bytes == 2 * 1024 * 1024


def test_model_file_server_settings_fill_in_defaults_only(tmp_path, monkeypatch):
    from openhood.cli.serve import apply_file_settings, model_specs

    monkeypatch.delenv("OPENHOOD_API_KEY", raising=False)
    toml = tmp_path / "m.toml"
    toml.write_text('[server]\nport = 9001\nmax-wait-ms = 5.0\nbuckets = [32, 96]\n\n[[models]]\nname = "m"\n')
    args = build_parser().parse_args(["serve", "--config", str(toml), "--port", "9002"])
    settings, specs = model_specs(args)
    apply_file_settings(args, settings)
    cfg = config_from_args(args)
    assert (cfg.port, cfg.max_wait_ms, cfg.buckets, specs[0].name) == (9002, 5.0, (32, 96), "m")  # the flag wins
    with pytest.raises(ValueError, match="unknown"):
        apply_file_settings(args, {"colour": "blue"})


@pytest.mark.parametrize(
    "setting, message",
    [
        ('workers = "two"', "[server] workers in the model file: expected an integer"),
        ("max-queue = 0", "[server] max-queue in the model file: must be >= 1, got 0"),
        ('priority = "loud"', "expected one of shortest, oldest"),
        ('truncate = "no"', "expected true or false"),
        ("port = [1]", "expected a string or a number"),
    ],
)
def test_model_file_server_values_are_checked_like_their_flags(tmp_path, capsys, setting, message):
    """Issue 31 (serve usage mistakes): a [server] value passes its flag's type and choices;
    before, `workers = "two"` was a TypeError traceback at start-up and `port = "abc"` a hang."""
    toml = tmp_path / "m.toml"
    toml.write_text(f'[server]\n{setting}\n\n[[models]]\nname = "m"\n')
    assert main(["serve", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("openhood serve: error: ") and message in err, err


def test_image_memory_budget_from_flag_or_env():
    from openhood.cli.serve import register

    assert config_from_args(build_parser().parse_args(["serve", "--image-memory-mb", "600"])).image_memory_mb == 600
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub, environ={"OPENHOOD_IMAGE_MEMORY_MB": "700"})
    assert config_from_args(sub.choices["serve"].parse_args([])).image_memory_mb == 700
    with pytest.raises(ValueError, match="image_memory_mb"):
        ServerConfig(image_memory_mb=0)
