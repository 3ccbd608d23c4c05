"""Start-up measurements cached per machine (server/measured.py): a restart reads the calibrated
budgets instead of measuring; a corrupted record is ignored with one warning line, measured
again and rewritten, and the server answers the same vectors either way. Real server processes
(paraphrase-MiniLM-L3-v2, one 1-thread worker: the cheapest start) over real HTTP."""

from __future__ import annotations

import json

import numpy as np

from openhood import diskcache
from openhood.scheduler.calibrate import Calibration
from openhood.server.measured import KIND, Measured, measure_or_read

from .conftest import ServerProcess

BOUNDS = (16, 32)
KEY = {"kind": "openhood.server.measured/1", "machine": {"cpu": "test"}, "calibrated": True}


def _measured() -> Measured:
    return Measured(Calibration(0.01, {16: 1e-4, 32: 2e-4}, [32, 64], 0.5), 0.2, cached=False)


def test_measure_once_then_read_and_a_record_that_does_not_fit_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENHOOD_CACHE_DIR", str(tmp_path))
    calls = []
    measure = lambda: calls.append(1) or _measured()  # noqa: E731
    first = measure_or_read(KEY, measure, BOUNDS)
    again = measure_or_read(KEY, measure, BOUNDS)
    assert (first.cached, again.cached, len(calls)) == (False, True, 1)
    assert again.calibration.budgets == [32, 64] and again.calibration.cost_per_token == {16: 1e-4, 32: 2e-4}
    assert again.batch_s == 0.2
    # A whole, hash-valid record whose budgets cannot hold one item of a bucket is not used.
    diskcache.write(
        KEY,
        {
            "batch_s": 0.2,
            "calibration": {"lone_s": 0.01, "cost_per_token": {"16": 1, "32": 1}, "budgets": [8, 64], "seconds": 0.1},
        },
    )
    assert measure_or_read(KEY, measure, BOUNDS).cached is False and len(calls) == 2


def _start(tmp_path, model, name: str, cache: str) -> ServerProcess:
    return ServerProcess(
        tmp_path / f"{name}.log",
        "--model", str(model),
        "--workers", "1", "--threads", "1", "--buckets", "16,32",
        env={"OPENHOOD_CACHE_DIR": cache},
    )  # fmt: skip


def _budget_event(srv: ServerProcess) -> dict:
    return next(line for line in srv.log_lines() if line.get("event") == "token_budget")


def _embed(srv: ServerProcess) -> np.ndarray:
    with srv.client() as c:
        r = c.post("/v1/embeddings", json={"input": ["cached start-up", "a second text of some length"]})
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]])


def test_restart_reads_the_budgets_and_a_corrupted_record_is_measured_again(tmp_path, para_dir):
    cache = str(tmp_path / "cache")
    runs = []
    for name in ("first", "second", "corrupted"):
        if name == "corrupted":
            for record in (tmp_path / "cache" / "records").glob("*.json"):
                if json.loads(record.read_bytes())["key"]["kind"] == KIND:  # the budgets, not --backend auto's verdict
                    record.write_bytes(record.read_bytes()[:-7] + b"garbage")
        srv = _start(tmp_path, para_dir, name, cache)
        try:
            runs.append((_budget_event(srv), _embed(srv), srv.log_lines()))
        finally:
            assert srv.stop() == 0
    (first, v1, _), (second, v2, log2), (third, v3, log3) = runs
    assert (first["cached"], second["cached"], third["cached"]) == (False, True, False)
    assert second["budgets"] == first["budgets"] and second["us_per_token"] == first["us_per_token"]
    warnings = [
        line for line in log3 if line.get("level") == "warning" and "corrupted or foreign" in line.get("message", "")
    ]
    assert len(warnings) == 1
    assert not [line for line in log2 if line.get("level") == "warning" and line.get("logger") == "openhood.cache"]
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(v1, v3)
