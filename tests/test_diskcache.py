"""The per-user cache of start-up records (openhood.diskcache): where it lives, a round trip,
a corrupted or foreign record ignored with one warning and rebuilt, concurrent writers from two
processes never leaving a torn record, an unwritable directory costing only the measurement."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from openhood import diskcache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENHOOD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


KEY = {"kind": "test", "machine": {"cpu": "x"}, "files": [("a", 1, 2)]}  # a tuple reads back as a list


def test_cache_root_follows_the_env_var_then_xdg(tmp_path):
    code = "import openhood; from openhood.cachedir import cache_root; print(cache_root()); print(openhood.NUMBA_CACHE_DIR)"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENHOOD_CACHE_DIR", "NUMBA_CACHE_DIR")}
    xdg = subprocess.run(
        [sys.executable, "-c", code], env={**env, "XDG_CACHE_HOME": str(tmp_path)}, capture_output=True, text=True
    )
    assert xdg.stdout.split() == [str(tmp_path / "openhood"), str(tmp_path / "openhood" / "numba")]
    mine = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "OPENHOOD_CACHE_DIR": str(tmp_path / "c")},
        capture_output=True,
        text=True,
    )
    assert mine.stdout.split() == [str(tmp_path / "c"), str(tmp_path / "c" / "numba")]


def test_round_trip_and_a_missing_record_is_silent(cache_dir, caplog):
    with caplog.at_level(logging.WARNING, "openhood.cache"):
        assert diskcache.read(KEY) is None
        diskcache.write(KEY, {"budgets": [48, 96]})
        assert diskcache.read(KEY) == {"budgets": [48, 96]}
    assert caplog.records == []
    assert diskcache.record_path(KEY).parent == cache_dir / "records"
    assert [p.name for p in (cache_dir / "records").iterdir()] == [diskcache.digest(KEY) + ".json"]  # no temp left


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b.replace(b"96", b"97"),  # a value changed: the hash no longer matches
        lambda b: b"\xff\xfe garbage",
        lambda b: b"",
    ],
)
def test_corrupted_record_is_ignored_with_one_warning_and_rebuilt(cache_dir, caplog, damage):
    diskcache.write(KEY, {"budgets": [48, 96]})
    path = diskcache.record_path(KEY)
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, "openhood.cache"):
        assert diskcache.read(KEY) is None
    assert len(caplog.records) == 1 and "corrupted or foreign" in caplog.records[0].getMessage()
    diskcache.write(KEY, {"budgets": [48, 96]})  # what the caller does after measuring again
    assert diskcache.read(KEY) == {"budgets": [48, 96]}


def test_foreign_record_under_the_name_is_ignored(cache_dir, caplog):
    other = {**KEY, "machine": {"cpu": "another CPU"}}
    diskcache.write(other, {"budgets": [1]})
    diskcache.record_path(KEY).write_bytes(diskcache.record_path(other).read_bytes())  # whole and self-consistent
    with caplog.at_level(logging.WARNING, "openhood.cache"):
        assert diskcache.read(KEY) is None
    assert len(caplog.records) == 1


def test_unwritable_cache_costs_a_warning_not_a_crash(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("OPENHOOD_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, "openhood.cache"):
        diskcache.write(KEY, {"x": 1})
        assert diskcache.read(KEY) is None
    assert len(caplog.records) == 1 and "not written" in caplog.records[0].getMessage()


WRITER = """
import sys
from openhood import diskcache
key = {"kind": "test", "machine": {"cpu": "x"}, "files": [("a", 1, 2)]}
for i in range(300):
    diskcache.write(key, {"writer": sys.argv[1], "i": i, "pad": "x" * 20000})
"""


def test_two_processes_writing_at_once_never_tear_a_record(cache_dir, caplog):
    env = {**os.environ, "OPENHOOD_CACHE_DIR": str(cache_dir)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name], env=env) for name in ("a", "b")]
    seen = set()
    with caplog.at_level(logging.WARNING, "openhood.cache"):
        while any(w.poll() is None for w in writers):
            value = diskcache.read(KEY)
            if value is not None:
                assert value["pad"] == "x" * 20000
                seen.add(value["writer"])
    assert [w.wait() for w in writers] == [0, 0]
    assert caplog.records == []  # no reader ever met half a file
    assert diskcache.read(KEY)["i"] == 299
    assert not [p for p in (cache_dir / "records").iterdir() if p.name.startswith(".tmp-")]
    json.loads(diskcache.record_path(KEY).read_text())  # whole JSON
