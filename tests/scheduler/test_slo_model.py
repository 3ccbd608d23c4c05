"""benchmarks/slo_model.py, the SLO sweep in virtual time: its machine and its bookkeeping give
the latencies one can work out by hand, so what it says about the policy can be trusted."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from openhood.scheduler import BatchPolicy

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "slo_model.py"
_SPEC = importlib.util.spec_from_file_location("slo_model", _PATH)
slo_model = importlib.util.module_from_spec(_SPEC)
sys.modules["slo_model"] = slo_model  # dataclasses look their module up while the file runs
_SPEC.loader.exec_module(slo_model)


def flat_cost(fixed_s: float, per_row_s: float):
    """The same line at every length: a batch of B rows costs fixed + B x per_row."""
    rows = np.array([1.0, 2.0])
    return slo_model.CostTable({t: (rows, fixed_s + rows * per_row_s) for t in (1, 256)})


def setup(**kw):
    base = dict(
        policy=BatchPolicy(max_wait_ms=2.0),
        budgets=[512, 512],
        token_costs=[1e-4, 1e-4],
        bounds=(64, 256),
        workers=2,
        wide=True,
        cost_one=flat_cost(0.0, 0.020),
        cost_wide=flat_cost(0.0, 0.012),
        wide_threads=2,
        cores=2.0,
        interference=1.0,
        loop_s=0.002,
        client_s=0.003,
    )
    base.update(kw)
    return slo_model.Setup(**base)


def test_the_cost_table_gives_timed_batches_back_and_interpolates_between_them():
    samples = [(b, t, 0.001 * t / 16 + b * 0.0005 * t / 16) for t in (16, 64) for b in (1, 2, 4, 8)]
    table = slo_model.fit_costs(samples)
    for b, t, secs in samples:
        assert table(b, t) == pytest.approx(secs)
    assert table(3, 16) == pytest.approx(0.001 + 3 * 0.0005)  # between timed rows
    assert table(16, 16) == pytest.approx(0.001 + 16 * 0.0005)  # past the last timed rows: same slope
    assert table(2, 40) == pytest.approx(0.0025 + 2 * 0.00125)  # halfway between the two lengths
    assert table(1, 8) == table(1, 16) and table(1, 300) == table(1, 64)  # clamped outside


def test_processor_sharing_slows_every_thread_once_cores_run_out():
    machine = slo_model.Machine(cores=1.0, interference=1.0)
    done = []
    for name in ("a", "b"):
        machine.jobs.append(slo_model._Job(1.0, 1, False, lambda n=name: done.append(n)))
    assert machine.next_finish() == pytest.approx(2.0)  # two threads on one core: half speed each
    finished = machine.advance(2.0)
    assert len(finished) == 2 and not machine.jobs
    engines = slo_model.Machine(cores=2.0, interference=1.5)
    engines.jobs += [slo_model._Job(1.0, 1, True, lambda: None) for _ in range(2)]
    assert engines.next_finish() == pytest.approx(1.5)  # own cores, but slowed by each other


def test_a_lone_request_costs_loop_plus_wide_engine_plus_client():
    lengths = np.array([30])
    out = slo_model.simulate(setup(), lengths, rate=None, clients=1, requests=20, seed=0)  # one at a time
    assert out.wide_share == 1.0
    np.testing.assert_allclose(out.latency_s, 0.002 + 0.012 + 0.003, atol=1e-9)


def test_without_the_wide_engine_a_lone_request_runs_on_one_thread():
    out = slo_model.simulate(setup(wide=False), np.array([30]), rate=None, clients=1, requests=20, seed=0)
    np.testing.assert_allclose(out.latency_s, 0.002 + 0.020 + 0.003, atol=1e-9)


def test_closed_loop_throughput_is_what_two_workers_can_do():
    # 64 clients, no loop cost, 10 ms per batch whatever its rows; a batch holds up to 512 // 30 =
    # 17 rows: two workers do at most 2 x 17 rows per 10 ms, and nearly that once the queue is full.
    s = setup(cost_one=flat_cost(0.010, 0.0), cost_wide=flat_cost(0.010, 0.0), loop_s=0.0)
    out = slo_model.simulate(s, np.array([30]), rate=None, clients=64, requests=3000, seed=0)
    assert 2 * 17 / 0.010 * 0.9 < out.throughput <= 2 * 17 / 0.010 * 1.001


def test_the_ideal_shared_server_runs_every_request_at_once():
    s = setup(shared=True, cores=1.0)
    out = slo_model.simulate(s, np.array([30]), rate=None, clients=2, requests=2, seed=0)
    np.testing.assert_allclose(out.latency_s, 2 * 0.020 + 0.003)  # two at once on one core


def test_bucket_ratios_keep_buckets_with_enough_samples():
    lat = np.concatenate([np.full(99, 0.010), [0.050], np.full(10, 0.1)])
    tokens = np.concatenate([np.full(100, 20), np.full(10, 200)])
    per = slo_model.bucket_ratios(slo_model.Outcome(lat, tokens, 1.0), min_samples=50)
    assert list(per) == ["0-32"]
    p50, p99, n = per["0-32"]
    assert n == 100 and p50 == pytest.approx(10.0) and p99 > 10.0


def test_a_sample_slower_than_a_bigger_batch_takes_the_bigger_ones_time():
    samples = [(1, 32, 0.010), (1, 48, 0.030), (1, 64, 0.016), (2, 32, 0.018), (2, 64, 0.030)]
    table = slo_model.fit_costs(samples)
    assert table(1, 48) == pytest.approx(0.016)  # 30 ms at 48 tokens was noise: 64 tokens took 16
    assert table(1, 32) == pytest.approx(0.010) and table(2, 64) == pytest.approx(0.030)


def length_cost(per_token_s: float):
    """A batch costs per_token x rows x padded length (no fixed part)."""
    rows = np.array([1.0, 2.0])
    return slo_model.CostTable({t: (rows, rows * t * per_token_s) for t in (8, 256)})


def test_a_preemptive_lone_request_costs_its_layers_and_nothing_more():
    s = setup(workers=1, wide=False, preempt=True, layers=6, yield_s=0.001, cost_one=length_cost(1e-4))
    out = slo_model.simulate(s, np.array([100]), rate=None, clients=1, requests=20, seed=0)
    np.testing.assert_allclose(out.latency_s, 0.002 + 100 * 1e-4 + 0.003, atol=1e-9)  # no yield when alone
    assert out.yields == 0


def test_preemption_shortens_the_short_requests_tail_behind_long_batches():
    # One worker; 90% 10-token requests (1 ms), 10% 250-token ones (25 ms): 3.4 ms of work per
    # request on average, offered at half the worker's capacity.
    lengths = np.array([10] * 9 + [250])
    base = dict(workers=1, wide=False, cost_one=length_cost(1e-4), loop_s=0.0, layers=6, token_costs=[1e-4, 1e-4])
    runs = {
        on: slo_model.simulate(setup(preempt=on, **base), lengths, rate=150.0, requests=3000, seed=1)
        for on in (False, True)
    }
    p99 = {on: np.percentile(out.latency_s[out.tokens == 10], 99) for on, out in runs.items()}
    assert runs[True].yields > 0 and runs[False].yields == 0
    assert p99[True] < 0.5 * p99[False]  # a short request no longer waits out a 25 ms batch
