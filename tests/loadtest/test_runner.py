"""The load generator against the stub server (loopback, a few seconds in all)."""

import time

import numpy as np
import pytest

from openhood.loadtest.client import plan_client
from openhood.loadtest.corpus import TextCorpus, synthetic_corpus
from openhood.loadtest.runner import RunConfig, poisson_schedule, run
from openhood.loadtest.stats import summarize


def _run(
    url,
    *,
    rate=None,
    concurrency=None,
    duration=1.0,
    warmup=0.0,
    pool=None,
    timeout=None,
    batch=1,
    corpus=None,
    seed=0,
    budget=0.5,
):
    cfg = RunConfig(
        url=url + "/v1/embeddings",
        rate=rate,
        concurrency=concurrency,
        duration=duration,
        warmup=warmup,
        batch=batch,
        seed=seed,
    )
    plan = plan_client(rate=rate, concurrency=concurrency, p99_budget_s=budget, timeout_s=timeout, max_connections=pool)
    return run(cfg, plan, (corpus or synthetic_corpus(200)).sampler(seed + 1))


def test_poisson_schedule_is_seeded_and_has_the_right_rate():
    a = poisson_schedule(200.0, 20.0, seed=5, cap=10**6)
    assert np.array_equal(a, poisson_schedule(200.0, 20.0, seed=5, cap=10**6))
    assert not np.array_equal(a, poisson_schedule(200.0, 20.0, seed=6, cap=10**6))
    assert len(a) == pytest.approx(4000, rel=0.08)
    assert np.all(np.diff(a) > 0) and a[-1] < 20.0
    gaps = np.diff(a)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)  # exponential gaps: CV = 1
    assert len(poisson_schedule(200.0, 20.0, seed=5, cap=100)) == 100


def test_closed_loop_keeps_n_clients_busy_and_excludes_warmup(stub):
    s = stub(service_s=0.01)
    r = _run(s.url, concurrency=4, duration=1.0, warmup=0.3)
    assert r.warmup_requests > 0
    assert np.all(r.scheduled >= 0.3)
    summary = summarize(r)
    assert summary["error_count"] == 0 and summary["ok"] == len(r.status) > 20
    assert summary["length_source"] == "usage.prompt_tokens"
    # At most 4 requests overlap at any instant (4 clients, one connection each).
    events = sorted([(t, 1) for t in r.scheduled] + [(t, -1) for t in r.done])
    assert max(np.cumsum([e[1] for e in events])) <= 4
    # The client's own CPU (it shares the cores with the server under test) is reported.
    assert r.cpu_s > 0 and summary["client_cpu_cores"] == pytest.approx(r.cpu_s / r.wall_s)
    # ... with the run's wall-clock window, for matching samples taken on the server's side
    start, end = summary["window_unix"]
    assert end - start == pytest.approx(r.wall_s) and abs(start - (time.time() - r.wall_s)) < 30


def test_open_loop_follows_the_seeded_schedule_and_times_from_it(stub):
    s = stub(service_s=0.002)
    r = _run(s.url, rate=60, duration=1.0, warmup=0.2, seed=7)
    expected = poisson_schedule(60, 1.2, seed=7, cap=10**6)
    expected = expected[expected >= 0.2]
    assert np.allclose(np.sort(r.scheduled), expected)
    assert np.all(r.sent >= r.scheduled - 1e-9)
    assert np.allclose(r.latency, r.done - r.scheduled)


def test_open_loop_counts_client_side_queueing_no_coordinated_omission(stub):
    # One connection, and request #5 stalls the server for 0.8 s. Requests arriving during the
    # stall cannot even be sent. Timed from the send they look fast; timed from their scheduled
    # arrival (what the user experiences) many are slow. The report must use the latter.
    s = stub(service_s=0.002, serial=True, stall_at=5, stall_s=0.8)
    r = _run(s.url, rate=40, duration=1.5, pool=1, timeout=5.0)
    assert summarize(r)["error_count"] == 0
    slow_latency = int(np.sum(r.latency > 0.3))
    slow_service = int(np.sum(r.service > 0.3))
    assert slow_service <= 2
    assert slow_latency >= 8  # ~40/s x 0.8 s arrive during the stall; most wait > 0.3 s
    s_sum = summarize(r)
    assert s_sum["latency_ms"]["p90"] > 3 * s_sum["service_ms"]["p90"]


def test_errors_are_counted_by_status(stub):
    s = stub(service_s=0.002, fail_every=4, fail_status=503)
    summary = summarize(_run(s.url, concurrency=2, duration=0.6))
    assert set(summary["errors"]) == {"503"}
    assert summary["errors"]["503"] == pytest.approx(summary["requests"] / 4, abs=2)
    assert not summary["slo"]["pass"]


def test_timeouts_and_refused_connections_are_errors_and_runs_stay_bounded(stub):
    s = stub(service_s=3.0)
    t = time.monotonic()
    summary = summarize(_run(s.url, concurrency=2, duration=0.3, timeout=0.3))
    assert time.monotonic() - t < 3.0
    assert set(summary["errors"]) == {"timeout"} and summary["ok"] == 0

    dead = s.url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
    summary = summarize(_run(dead, rate=20, duration=0.3))
    assert summary["ok"] == 0 and set(summary["errors"]) == {"connect_error"}


def test_batch_and_char_fallback(stub):
    s = stub(service_s=0.001, usage=False)
    r = _run(s.url, concurrency=1, duration=0.3, batch=3, corpus=TextCorpus(["a b c", "d e"]))
    assert set(r.n_texts.tolist()) == {3}
    assert np.all(r.tokens == -1)
    assert summarize(r)["length_source"].startswith("estimated")


def test_closed_loop_gives_each_user_its_own_client_and_open_loop_splits_its_pool(stub, monkeypatch):
    # One shared pool of N connections scans all N per request (httpcore); N pools of one do not.
    from openhood.loadtest import runner as runner_mod

    made = []
    real = runner_mod.make_client

    def counting(plan):
        client = real(plan)
        made.append((plan.max_connections, client))
        return client

    monkeypatch.setattr(runner_mod, "make_client", counting)
    s = stub(service_s=0.005)
    r = _run(s.url, concurrency=3, duration=0.5)
    assert summarize(r)["error_count"] == 0
    assert [n for n, _ in made] == [1, 1, 1]
    assert all(c.is_closed for _, c in made)
    made.clear()
    _run(s.url, rate=20, duration=0.3, pool=20)  # open loop: the plan's pool in pools of <= 8
    assert sorted(n for n, _ in made) == [6, 7, 7] and all(c.is_closed for _, c in made)
