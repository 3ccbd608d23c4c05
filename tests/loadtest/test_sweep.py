import json

import pytest

from openhood.cli import main
from openhood.loadtest.sweep import bisect_rate, format_sweep, rate_sweep


def fake_runner(capacity, calls):
    """A pretend server that meets the SLO up to ``capacity`` req/s."""

    def run_at(rate, seed):
        calls.append((rate, seed))
        ok = rate <= capacity
        summary = {
            "latency_ms": {"p50": 10.0, "p99": 20.0 if ok else 900.0, "ratio": 2.0 if ok else 90.0},
            "buckets": [],
            "slo": {"pass": ok, "reasons": [] if ok else ["P99 900 ms > budget"], "buckets_checked": []},
            "throughput_rps": min(rate, capacity),
            "error_count": 0,
        }
        return object(), summary

    return run_at


def test_sweep_steps_then_bisects_and_judges_every_rate_on_its_repeats():
    calls = []
    sweep = rate_sweep(
        fake_runner(37.0, calls), start=10, max_rate=1000, seed=3, bisect_steps=3, repeats=3, p99_budget_ms=500
    )
    probed = [r["rate"] for r in sweep["rates"]]
    assert probed == [10, 20, 40, 30, 35, 37.5]  # steps x2 to the first failure, then bisection
    assert [r["phase"] for r in sweep["rates"]] == ["step"] * 3 + ["bisect"] * 3
    assert sweep["best_rate"] == 35 and sweep["first_failing_rate"] == 37.5
    assert [c[1] for c in calls] == [3, 4, 5] * 6  # the same three seeds at every rate
    assert sweep["repeat_passes"] == 3 and sweep["repeats_run"] == 3 and sweep["need"] == 2
    assert sweep["p99_spread_at_best_ms"] == [20.0, 20.0]
    assert sweep["best"] is not None
    assert "highest rate meeting the SLO: 35.0" in format_sweep(sweep)


def test_a_rate_passes_on_a_majority_of_its_repeats_unless_all_are_needed():
    def flaky(rate, seed):  # seed 1 always fails: an unlucky run
        result, summary = fake_runner(37.0, [])(rate, seed)
        if seed == 1:
            summary = {**summary, "slo": {**summary["slo"], "pass": False, "reasons": ["unlucky"]}}
        return result, summary

    majority = rate_sweep(flaky, start=10, max_rate=1000, seed=0, repeats=3, p99_budget_ms=500)
    assert majority["best_rate"] == 35 and majority["repeat_passes"] == 2
    strict = rate_sweep(flaky, start=10, max_rate=1000, seed=0, repeats=3, need=3, p99_budget_ms=500)
    assert strict["best_rate"] is None
    with pytest.raises(ValueError):
        rate_sweep(flaky, start=10, max_rate=100, seed=0, repeats=2, need=3, p99_budget_ms=500)


def test_bisect_rate_with_a_fake_measure_brackets_the_capacity():
    for capacity in (12.0, 37.0, 64.0, 99.0):
        seen = []

        def passes(rate, capacity=capacity, seen=seen):
            seen.append(rate)
            return rate <= capacity

        best, fail = bisect_rate(passes, start=10, max_rate=1000, factor=2, bisect_steps=6)
        assert best <= capacity < fail and (fail - best) / fail < 0.05
        assert len(seen) == len(set(seen))  # never probes a rate twice
    assert bisect_rate(lambda r: True, start=10, max_rate=35) == (35, None)
    assert bisect_rate(lambda r: False, start=10, max_rate=35, bisect_steps=2) == (None, 2.5)  # 10, 5, 2.5 all fail


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
    rc = main(
        [
            "loadtest",
            s.url,
            "--sweep",
            "--sweep-start",
            "15",
            "--sweep-max",
            "30",
            "--sweep-repeats",
            "1",
            "--duration",
            "0.8",
            "--warmup",
            "0.2",
            "--p99-budget",
            "2000",
            "--quiet",
            "--json",
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [r["rate"] for r in out["sweep"]["runs"]] == [15, 30]
    assert out["sweep"]["best_rate"] == 30
    assert "plot-sweep" in (tmp_path / "rep" / "index.html").read_text()


def test_cli_closed_loop_json_and_text(stub, capsys):
    s = stub(service_s=0.002)
    assert (
        main(["loadtest", s.url, "--concurrency", "2", "--duration", "0.5", "--warmup", "0", "--quiet", "--json"]) == 0
    )
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
