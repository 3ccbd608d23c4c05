import json

import pytest

from openhood.cli import main
from openhood.loadtest.sweep import format_sweep, rate_sweep


def fake_runner(capacity, calls):
    """A pretend server that meets the SLO up to ``capacity`` req/s."""

    def run_at(rate, seed):
        calls.append((rate, seed))
        ok = rate <= capacity
        summary = {"latency_ms": {"p50": 10.0, "p99": 20.0 if ok else 900.0, "ratio": 2.0 if ok else 90.0},
                   "buckets": [], "slo": {"pass": ok, "reasons": [] if ok else ["P99 900 ms > budget"],
                                          "buckets_checked": []},
                   "throughput_rps": min(rate, capacity), "error_count": 0}
        return object(), summary

    return run_at


def test_sweep_steps_bisects_and_repeats():
    calls = []
    sweep = rate_sweep(fake_runner(37.0, calls), start=10, max_rate=1000, seed=3, bisect_steps=3, repeats=2,
                       p99_budget_ms=500)
    phases = [r["phase"] for r in sweep["runs"]]
    assert phases == ["step"] * 3 + ["bisect"] * 3 + ["repeat"] * 2
    assert [c[0] for c in calls[:3]] == [10, 20, 40]
    assert 30 <= sweep["best_rate"] <= 37 and sweep["first_failing_rate"] <= 40
    assert sweep["repeat_passes"] == 2
    assert [c[1] for c in calls] == [3] * 6 + [4, 5]  # repeats use other seeds
    assert sweep["best"] is not None
    assert "highest rate meeting the SLO" in format_sweep(sweep)


def test_sweep_with_no_passing_rate_and_with_a_ceiling():
    sweep = rate_sweep(fake_runner(1.0, []), start=10, max_rate=100, seed=0, p99_budget_ms=500)
    assert sweep["best_rate"] is None and sweep["best"] is None
    assert "no offered rate met the SLO" in format_sweep(sweep)
    sweep = rate_sweep(fake_runner(1e9, []), start=10, max_rate=35, seed=0, repeats=1, p99_budget_ms=500)
    assert sweep["best_rate"] == 35 and sweep["first_failing_rate"] is None
    with pytest.raises(ValueError):
        rate_sweep(fake_runner(1, []), start=0, max_rate=10, seed=0, p99_budget_ms=500)


def test_cli_sweep_against_the_stub(stub, capsys, tmp_path):
    s = stub(service_s=0.002)
    rc = main(["loadtest", s.url, "--sweep", "--sweep-start", "15", "--sweep-max", "30", "--sweep-repeats", "1",
               "--duration", "0.8", "--warmup", "0.2", "--p99-budget", "2000", "--quiet", "--json",
               "--report", str(tmp_path / "rep")])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [r["rate"] for r in out["sweep"]["runs"]] == [15, 30, 30]
    assert out["sweep"]["best_rate"] == 30
    assert "plot-sweep" in (tmp_path / "rep" / "index.html").read_text()


def test_cli_closed_loop_json_and_text(stub, capsys):
    s = stub(service_s=0.002)
    assert main(["loadtest", s.url, "--concurrency", "2", "--duration", "0.5", "--warmup", "0", "--quiet",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "closed" and summary["ok"] > 0 and summary["concurrency"] == 2
    assert main(["loadtest", s.url, "--rate", "20", "--duration", "0.5", "--warmup", "0"]) == 0
    cap = capsys.readouterr()
    assert "P99/P50" in cap.out and "SLO" in cap.out
    assert "[open 20/s]" in cap.err  # the progress line


def test_cli_argument_errors(capsys, tmp_path):
    assert main(["loadtest", "http://127.0.0.1:1", "--duration", "1"]) == 2
    assert "give --rate" in capsys.readouterr().err
    assert main(["loadtest", "http://127.0.0.1:1", "--rate", "5", "--corpus", str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["loadtest", "http://127.0.0.1:1", "--rate", "0", "--wait-ready", "0"]) == 2
    assert "--rate: must be" in capsys.readouterr().err
