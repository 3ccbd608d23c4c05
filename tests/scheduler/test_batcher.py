"""DynamicBatcher with a fake engine: batch formation, caps, timing triggers, cancellation, failures."""

import sys
import threading
import time
from concurrent.futures import wait
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from fakes import FakeBackend, FakeTokenizer, runner

from openhood.scheduler import (
    BatchFailedError,
    BatchPolicy,
    DynamicBatcher,
    LengthBuckets,
    QueueFullError,
    RequestTooLargeError,
    SchedulerStoppedError,
)

TOK = FakeTokenizer()
BUCKETS = LengthBuckets((8, 16, 64))


def words(n: int, salt: str = "w") -> str:
    return " ".join(f"{salt}{i}" for i in range(n))


def make(backend=None, **kw):
    backend = backend or FakeBackend(max_length=64)
    kw.setdefault("max_wait_ms", 2.0)
    hooks = {k: kw.pop(k) for k in ("on_batch", "on_drop") if k in kw}
    batcher = DynamicBatcher(runner(backend), BUCKETS, BatchPolicy(**kw), **hooks)
    batcher.start()
    return batcher, backend


def single(backend, text):
    ids = TOK.encode(text)[None, :].astype(np.int64)
    return backend.embed(ids, np.ones_like(ids))[0]


def test_batched_equals_unbatched_and_rows_stay_in_order():
    batcher, backend = make(max_batch_size=16)
    texts = [words(n, salt=f"s{n}_") for n in (1, 3, 5, 7, 9, 12, 20, 33, 2, 6, 14, 50)]
    futures = [f for t in texts for f in batcher.submit([TOK.encode(t)])]
    results = [f.result(timeout=10) for f in futures]
    batcher.stop(5)
    assert max(r.batch.size for r in results) > 1  # they really were batched
    for text, r in zip(texts, results, strict=True):
        np.testing.assert_allclose(r.output, single(backend, text), atol=1e-5)


def test_batches_never_mix_buckets_and_respect_caps():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()  # hold the worker so everything queues up first
    batcher, _ = make(backend, max_batch_size=4, max_batch_tokens=64)
    seqs = [TOK.encode(words(n)) for n in [2] * 9 + [10] * 5 + [40] * 3]
    futures = batcher.submit(seqs)
    backend.gate.set()
    results = [f.result(timeout=10) for f in futures]
    batcher.stop(5)
    for seq, r in zip(seqs, results, strict=True):
        assert r.batch.padded_len >= len(seq)
        assert r.batch.bucket == BUCKETS.upper(BUCKETS.index(len(seq)))
        assert r.batch.size <= 4 and r.batch.padded_tokens <= 64
    for b, t in backend.calls:
        assert b * t <= 64 and b <= 4


def test_pad_to_bucket_uses_static_shapes():
    batcher, backend = make(pad_to="bucket")
    r = batcher.submit([TOK.encode(words(3))])[0].result(timeout=10)
    batcher.stop(5)
    assert backend.calls[-1][1] == 8 and r.batch.padded_len == 8
    np.testing.assert_allclose(r.output, single(backend, words(3)), atol=1e-5)


def test_full_batch_fires_without_waiting_for_max_wait():
    batcher, _ = make(max_batch_size=4, max_wait_ms=60_000)
    futures = batcher.submit([TOK.encode(words(2, salt=str(i))) for i in range(4)])
    done, _ = wait(futures, timeout=10)
    assert len(done) == 4  # a 60 s max_wait was never waited for
    lone = batcher.submit([TOK.encode("lonely")])[0]
    assert lone.result(timeout=10)  # nothing running anywhere: a lone request goes at once
    batcher.stop(5)


def test_a_request_waits_for_batch_mates_only_while_another_worker_is_busy():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    batcher = DynamicBatcher([runner(backend)] * 2, BUCKETS, BatchPolicy(max_wait_ms=60_000))
    batcher.start()
    blocker = batcher.submit([TOK.encode("block")])[0]  # an idle server: runs at once, held by the gate
    while batcher.queue_depth:
        time.sleep(0.005)
    lone = batcher.submit([TOK.encode("lonely")])[0]
    assert not wait([lone], timeout=0.3).done  # the other worker waits for batch-mates...
    backend.gate.set()
    assert batcher.stop(10) and lone.result(timeout=1) and blocker.result(timeout=1)  # ...stop() flushes it


def test_queue_full_is_all_or_nothing_with_retry_after():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    batcher, _ = make(backend, max_queue=3, max_batch_size=1)
    first = batcher.submit([TOK.encode("a")])
    deadline = time.monotonic() + 5
    while batcher.queue_depth and time.monotonic() < deadline:  # worker picks it up and blocks
        time.sleep(0.01)
    batcher.submit([TOK.encode("b"), TOK.encode("c")])
    with pytest.raises(QueueFullError) as info:
        batcher.submit([TOK.encode("d"), TOK.encode("e")])  # 2 + 2 > 3: refused whole
    assert info.value.retry_after_s >= 1 and batcher.queue_depth == 2
    batcher.submit([TOK.encode("f")])  # 2 + 1 fits
    backend.gate.set()
    assert first[0].result(timeout=10)
    batcher.stop(5)


def test_intake_is_not_blocked_by_inference():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    batcher, _ = make(backend, max_batch_size=1)
    batcher.submit([TOK.encode("x")])
    while not backend.calls and batcher.busy_for_s() == 0:
        time.sleep(0.005)
    t0 = time.monotonic()
    batcher.submit([TOK.encode("y")])  # the worker is inside embed(); the lock must be free
    assert time.monotonic() - t0 < 1.0
    backend.gate.set()
    batcher.stop(5)


def test_cancelled_sequences_are_dropped_before_inference():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    dropped = []
    batcher, _ = make(backend, max_batch_size=8, on_drop=dropped.append)
    blocker = batcher.submit([TOK.encode("block")])
    while batcher.queue_depth:
        time.sleep(0.005)
    gone = batcher.submit([TOK.encode(words(3, "gone"))] * 3)
    kept = batcher.submit([TOK.encode(words(3, "kept"))])
    assert all(f.cancel() for f in gone)
    backend.gate.set()
    kept[0].result(timeout=10), blocker[0].result(timeout=10)
    batcher.stop(5)
    assert sum(dropped) == 3
    assert sum(b for b, _ in backend.calls) == 2  # only "block" and "kept" reached the engine


def test_engine_failure_fails_only_its_batch_and_worker_survives():
    backend = FakeBackend(max_length=64, fail_len=7)
    batcher, _ = make(backend)
    bad = batcher.submit([TOK.encode(words(5))])[0]  # 5 words + 2 specials = 7 tokens
    good = batcher.submit([TOK.encode(words(20))])[0]  # another bucket, another batch
    with pytest.raises(BatchFailedError):
        bad.result(timeout=10)
    assert good.result(timeout=10).output.shape == (16,)
    assert batcher.submit([TOK.encode("after")])[0].result(timeout=10)
    assert batcher.worker_alive
    batcher.stop(5)


def test_one_bad_item_fails_its_request_alone_not_its_batch_mates():
    backend = FakeBackend(max_length=64, fail_len=7)
    backend.gate.clear()  # hold the worker so the next four items form one batch
    batcher, _ = make(backend, max_batch_size=8, max_wait_ms=50.0)
    blocker = batcher.submit([TOK.encode("block")])
    while batcher.queue_depth:
        time.sleep(0.005)
    mates = [batcher.submit([TOK.encode(words(n, salt=f"m{n}_"))])[0] for n in (3, 4, 6)]  # 5, 6, 8 tokens
    bad = batcher.submit([TOK.encode(words(5))])[0]  # 7 tokens: the engine raises for any batch holding it
    backend.gate.set()
    blocker[0].result(timeout=10)
    with pytest.raises(BatchFailedError, match="this input"):
        bad.result(timeout=10)
    for n, f in zip((3, 4, 6), mates, strict=True):  # each answered, and exactly as it would be alone
        np.testing.assert_allclose(f.result(timeout=10).output, single(backend, words(n, salt=f"m{n}_")), atol=1e-5)
    batcher.stop(5)
    assert any(b == 4 for b, _ in backend.calls)  # the four did share one (failed) batch
    assert batcher.worker_alive is False


def test_the_token_cap_bounds_queued_work_whatever_the_item_count():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()  # hold the worker: everything after the blocker stays queued
    batcher, _ = make(backend, max_batch_size=1)
    batcher.max_queue_tokens = 40
    blocker = batcher.submit([TOK.encode("block")])
    while batcher.queue_depth:
        time.sleep(0.005)
    with pytest.raises(RequestTooLargeError, match="41 tokens"):
        batcher.submit([[1] * 41])  # more than the whole cap: it could never be queued
    first = batcher.submit([[1] * 30])
    with pytest.raises(QueueFullError):
        batcher.submit([[1] * 11])  # 30 + 11 > 40: wait and retry
    second = batcher.submit([[1] * 10])  # 40: fits exactly
    assert first[0].cancel()  # a dropped item gives its tokens back when the worker skips it
    backend.gate.set()
    blocker[0].result(timeout=10), second[0].result(timeout=10)
    batcher.submit([[1] * 40])[0].result(timeout=10)  # the queue is empty again: the whole cap
    batcher.stop(5)
    assert batcher._queued_tokens == 0


def test_engine_only_runs_on_the_worker_thread_and_jobs_share_it():
    batcher, backend = make()
    batcher.submit([TOK.encode("a b")])[0].result(timeout=10)
    name = batcher.run_exclusive(lambda: threading.current_thread().name).result(timeout=10)
    batcher.stop(5)
    assert backend.thread_names == {"openhood-worker-0"} and name == "openhood-worker-0"


def test_stop_refuses_new_work_and_flushes_queued():
    batcher, _ = make(max_wait_ms=60_000)
    queued = batcher.submit([TOK.encode("q1"), TOK.encode("q2 q2")])
    assert batcher.stop(10)
    assert all(f.result(timeout=1) for f in queued)
    with pytest.raises(SchedulerStoppedError):
        batcher.submit([TOK.encode("late")])


def test_token_budget_must_hold_the_largest_bucket():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        DynamicBatcher(runner(FakeBackend()), BUCKETS, BatchPolicy(max_batch_tokens=32))


def test_a_failing_observer_neither_kills_the_worker_nor_fails_callers():
    def broken_metrics(info, ok):
        raise ValueError("metrics bug")

    batcher, _ = make(on_batch=broken_metrics)
    assert batcher.submit([TOK.encode("a b c")])[0].result(timeout=10).output.shape == (16,)
    assert batcher.worker_alive
    assert batcher.run_exclusive(lambda: 42).result(timeout=10) == 42
    batcher.stop(5)


def test_shortest_bucket_goes_first_and_the_oldest_with_priority_oldest():
    for priority, first in (("shortest", 8), ("oldest", 64)):
        backend = FakeBackend(max_length=64)
        backend.gate.clear()
        batcher, _ = make(backend, max_batch_size=1, priority=priority, max_age_ms=60_000)
        blocker = batcher.submit([TOK.encode("block")])
        while batcher.queue_depth:
            time.sleep(0.005)
        long_f = batcher.submit([TOK.encode(words(40))])  # queued first, bucket 64
        time.sleep(0.01)
        short_f = batcher.submit([TOK.encode(words(2))])  # queued later, bucket 8
        backend.gate.set()
        results = [f.result(timeout=10) for f in (*blocker, *long_f, *short_f)]
        batcher.stop(5)
        order = sorted(results[1:], key=lambda r: r.batch.batch_id)
        assert order[0].batch.bucket == first, priority


def test_a_request_older_than_max_age_goes_before_shorter_ones():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    batcher, _ = make(backend, max_batch_size=1, priority="shortest", max_age_ms=20)
    blocker = batcher.submit([TOK.encode("block")])
    while batcher.queue_depth:
        time.sleep(0.005)
    long_f = batcher.submit([TOK.encode(words(40))])
    time.sleep(0.05)  # the long request is now past max_age
    short_f = batcher.submit([TOK.encode(words(2))])
    backend.gate.set()
    r_long, r_short = long_f[0].result(timeout=10), short_f[0].result(timeout=10)
    blocker[0].result(timeout=10)
    batcher.stop(5)
    assert r_long.batch.batch_id < r_short.batch.batch_id


def test_each_worker_calls_only_its_own_engine_and_they_run_concurrently():
    backends = [FakeBackend(max_length=64), FakeBackend(max_length=64)]
    for b in backends:
        b.gate.clear()
    batcher = DynamicBatcher([runner(b) for b in backends], BUCKETS, BatchPolicy(max_batch_size=1, max_wait_ms=0))
    batcher.start()
    assert batcher.workers == 2
    futures = batcher.submit([TOK.encode(words(n, salt=f"c{n}_")) for n in (2, 3, 4, 5)])
    deadline = time.monotonic() + 5
    while batcher.queue_depth > 2 and time.monotonic() < deadline:  # both workers took one each
        time.sleep(0.005)
    assert batcher.queue_depth == 2  # two batches in flight at once, one per worker
    for b in backends:
        b.gate.set()
    results = [f.result(timeout=10) for f in futures]
    jobs = [batcher.run_exclusive(lambda: threading.current_thread().name, worker=w) for w in (0, 1)]
    names = [j.result(timeout=10) for j in jobs]
    batcher.stop(5)
    assert names == ["openhood-worker-0", "openhood-worker-1"]
    assert backends[0].thread_names == {"openhood-worker-0"} and backends[1].thread_names == {"openhood-worker-1"}
    assert all(b.calls for b in backends)
    for n, r in zip((2, 3, 4, 5), results, strict=True):
        np.testing.assert_allclose(r.output, single(backends[0], words(n, salt=f"c{n}_")), atol=1e-5)


def test_one_worker_failing_leaves_the_other_serving():
    good, bad = FakeBackend(max_length=64), FakeBackend(max_length=64, fail_len=7)
    batcher = DynamicBatcher([runner(bad), runner(good)], BUCKETS, BatchPolicy(max_batch_size=1, max_wait_ms=0))
    batcher.start()
    outcomes = []
    for _ in range(20):
        f = batcher.submit([TOK.encode(words(5))])[0]  # 7 tokens: fails on the bad engine only
        try:
            outcomes.append(f.result(timeout=10).output.shape)
        except BatchFailedError:
            outcomes.append("failed")
    assert batcher.worker_alive
    batcher.stop(5)
    assert (16,) in outcomes  # the good worker answered some
    assert set(outcomes) <= {(16,), "failed"}


def test_stop_joins_every_worker_and_bad_settings_are_refused():
    batcher = DynamicBatcher([runner(FakeBackend())] * 3, BUCKETS)
    batcher.start()
    assert batcher.stop(5) and not batcher.worker_alive
    with pytest.raises(ValueError, match="priority"):
        BatchPolicy(priority="random")
    with pytest.raises(ValueError, match="callable"):
        DynamicBatcher([], BUCKETS)
    one, _ = make()
    with pytest.raises(ValueError, match="worker"):
        one.run_exclusive(lambda: 1, worker=5)
    one.stop(5)


def test_short_lane_worker_never_runs_a_long_bucket():
    lane, other = FakeBackend(max_length=64), FakeBackend(max_length=64)
    batcher = DynamicBatcher(
        [runner(lane), runner(other)], BUCKETS, BatchPolicy(max_batch_size=1, max_wait_ms=0, short_lane_tokens=16)
    )
    other.gate.clear()  # the other worker holds its first batch, so the lane must take short ones
    batcher.start()
    # The other worker stalls on its first batch, so the short items must reach the lane (else,
    # on a busy machine, the other worker could run them all before the lane thread wakes).
    other.gate.clear()
    futures = batcher.submit([TOK.encode(words(n, salt=f"l{i}_")) for i, n in enumerate([2, 40, 10, 50, 3, 30] * 4)])
    deadline = time.monotonic() + 10
    while not lane.calls and time.monotonic() < deadline:
        time.sleep(0.005)
    other.gate.set()
    results = [f.result(timeout=10) for f in futures]
    batcher.stop(5)
    assert all(t <= 16 for _, t in lane.calls) and lane.calls  # buckets 8 and 16 only
    assert any(t > 16 for _, t in other.calls)  # the long ones all went to the other worker
    assert len(results) == 24
    with pytest.raises(ValueError, match="short_lane_tokens"):
        BatchPolicy(short_lane_tokens=-1)


def test_a_long_request_is_not_stranded_when_only_the_lane_is_woken():
    lane, other = FakeBackend(max_length=64), FakeBackend(max_length=64)
    batcher = DynamicBatcher([runner(lane), runner(other)], BUCKETS, BatchPolicy(max_wait_ms=0, short_lane_tokens=16))
    batcher.start()
    time.sleep(0.05)  # both workers asleep on the condition
    for i in range(5):
        assert batcher.submit([TOK.encode(words(40, salt=f"x{i}"))])[0].result(timeout=5).batch.bucket == 64
    batcher.stop(5)
    assert not lane.calls


def test_per_bucket_budgets_apply_until_a_surge_then_batches_fill_max_batch_tokens():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    batcher, _ = make(backend, max_batch_size=32, max_batch_tokens=64, surge_items=6, max_wait_ms=0)
    batcher.set_token_budgets([8, 16, 64])  # bucket 8: one 8-token item per batch below the surge
    with pytest.raises(ValueError):
        batcher.set_token_budgets([4, 16, 64])  # cannot hold one item of its bucket
    blocker = batcher.submit([TOK.encode(words(2))])
    while batcher.queue_depth:
        time.sleep(0.005)
    calm = batcher.submit([TOK.encode(words(5, salt=f"a{i}")) for i in range(3)])  # 3 queued < surge
    backend.gate.set()
    sizes = {f.result(timeout=10).batch.size for f in calm}
    assert sizes == {1}  # the calibrated budget of bucket 8 fits one 7-token item
    backend.gate.clear()
    blocker2 = batcher.submit([TOK.encode(words(2))])
    while batcher.queue_depth:
        time.sleep(0.005)
    surge = batcher.submit([TOK.encode(words(5, salt=f"b{i}")) for i in range(8)])  # 8 queued >= surge
    backend.gate.set()
    assert max(f.result(timeout=10).batch.size for f in surge) > 1  # batches grow toward max_batch_tokens
    blocker[0].result(timeout=10), blocker2[0].result(timeout=10)
    batcher.stop(5)


def test_a_backlog_batches_similar_lengths_together_and_the_oldest_goes_first():
    backend = FakeBackend(max_length=64)
    backend.gate.clear()
    seen: list = []
    batcher, _ = make(
        backend,
        max_batch_size=8,
        max_batch_tokens=128,
        surge_items=1,
        max_wait_ms=0,
        on_batch=lambda b, ok: seen.append(b),
    )
    blocker = batcher.submit([TOK.encode(words(2))])
    while batcher.queue_depth:
        time.sleep(0.005)
    # One bucket (17-64 tokens), lengths alternating: in arrival order every batch would pad the
    # short rows to the long ones (2 x 60 tokens per 128-token batch, half of it padding).
    texts = [words(n, salt=f"m{i}_") for i, n in enumerate([58, 18, 58, 18, 58, 18, 58, 18])]
    seqs = [TOK.encode(t) for t in texts]
    lengths = [len(s) for s in seqs]
    assert len(set(lengths)) == 2 and BUCKETS.index(min(lengths)) == BUCKETS.index(max(lengths))
    futures = batcher.submit(seqs)
    backend.gate.set()
    results = [f.result(timeout=10) for f in futures]
    blocker[0].result(timeout=10)
    batcher.stop(5)
    for text, r in zip(texts, results, strict=True):  # rows still go back to their own request
        np.testing.assert_allclose(r.output, single(backend, text), atol=1e-5)
    mixed = [b for b in seen[1:] if b.real_tokens != b.padded_tokens]
    assert not mixed, f"batches padded short rows to long ones: {mixed}"
    first = results[0].batch  # the oldest queued item is in the first batch after the blocker
    assert first.batch_id == seen[1].batch_id
    assert {r.batch.batch_id for r, n in zip(results, lengths, strict=True) if n == min(lengths)}.isdisjoint(
        {r.batch.batch_id for r, n in zip(results, lengths, strict=True) if n == max(lengths)}
    )


def test_a_worker_counts_as_idle_once_its_engine_returned_not_after_reporting():
    # A lone client's next request can arrive while the worker still reports the last batch
    # (metrics). It must find the server idle and run at once, not wait max_wait_ms for mates.
    reporting = threading.Event()
    unblock = threading.Event()

    def slow_observer(info, ok):
        reporting.set()
        unblock.wait(10)

    backend = FakeBackend(max_length=64)
    batcher = DynamicBatcher([runner(backend)] * 2, BUCKETS, BatchPolicy(max_wait_ms=60_000), on_batch=slow_observer)
    batcher.start()
    try:
        first = batcher.submit([TOK.encode("first")])[0]
        assert first.result(timeout=10)
        assert reporting.wait(10)  # worker still inside the observer
        second = batcher.submit([TOK.encode("second")])[0]
        done, _ = wait([second], timeout=5)
        assert done, "the next lone request waited for the reporting worker"
    finally:
        unblock.set()
        batcher.stop(5)


def test_the_worker_steps_run_on_a_virtual_clock():
    """next_batch / batch_done with an injected clock (what benchmarks/slo_model.py drives): an
    item goes at once on an idle server (wide), waits max_wait_ms for batch-mates while another
    worker is busy, and the wide engine is one batch at a time."""
    now = [0]
    noop = runner(FakeBackend(max_length=64))
    batcher = DynamicBatcher(
        [noop, noop],
        BUCKETS,
        BatchPolicy(max_wait_ms=2.0, short_lane_tokens=0),
        wide_run=noop,
        clock=lambda: now[0],
    )
    batcher.submit([np.arange(5)])
    items, wait_s, wide = batcher.next_batch(0)
    assert len(items) == 1 and wait_s is None and wide  # idle server: at once, on every core
    batcher.submit([np.arange(6)])
    items, wait_s, wide = batcher.next_batch(1)
    assert items is None and wait_s == pytest.approx(0.002)  # worker 0 busy: wait for batch-mates
    now[0] += 1_000_000
    batcher.submit([np.arange(7)])
    assert batcher.next_batch(1)[0] is None
    now[0] += 1_000_000  # the first item's max_wait_ms is up: both go, and not wide (worker 0 busy)
    items, wait_s, wide = batcher.next_batch(1)
    assert [len(it.payload) for it in items] == [6, 7] and not wide
    assert batcher.busy_for_s() == pytest.approx(0.002)
    batcher.batch_done(0, True)
    batcher.batch_done(1, False)
    assert batcher.busy_for_s() == 0.0 and batcher.queue_depth == 0


def test_the_wide_engine_waits_for_sequential_traffic():
    now = [10**9]
    noop = runner(FakeBackend(max_length=64))
    batcher = DynamicBatcher(
        [noop, noop],
        BUCKETS,
        BatchPolicy(max_wait_ms=0, short_lane_tokens=0, wide_quiet_ms=100),
        wide_run=noop,
        clock=lambda: now[0],
    )

    def lone() -> bool:
        batcher.submit([np.arange(5)])
        _, _, wide = batcher.next_batch(0)
        batcher.batch_done(0, wide)
        return wide

    assert lone() and lone()  # one request at a time: wide
    batcher.submit([np.arange(5)])
    batcher.next_batch(0)
    batcher.submit([np.arange(6)])
    assert not batcher.next_batch(1)[2]  # beside a running batch: an overlap
    batcher.batch_done(0, True)
    batcher.batch_done(1, False)
    now[0] += 99_000_000
    assert not lone()  # idle, but traffic overlapped 99 ms ago
    now[0] += 1_000_000
    assert lone()  # 100 ms without overlap: sequential again
