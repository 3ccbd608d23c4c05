"""Layer-granular preemption (scheduler.preemption): the decision rule, the batcher's steps on a
virtual clock, and real worker threads with a fake resumable engine (yields, cancellation, drain)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from openhood.scheduler import BatchPolicy, DynamicBatcher, LengthBuckets
from openhood.scheduler.preemption import Candidate, Run, choose

BUCKETS = LengthBuckets((16, 64, 256))
MS = 1_000_000


def _run(work_s: float, head_ns: int = 0, steps: int = 6, done: int = 0) -> Run:
    return Run([], 0, 8, work_s, head_ns, head_ns, steps=steps, done_steps=done)


def test_shortest_remaining_work_first_ties_keep_the_running_batch():
    running = _run(0.060, done=3)  # 30 ms left
    assert choose(running, [], Candidate(0.010, 0), 0, 100 * MS) == Candidate(0.010, 0)
    assert choose(running, [], Candidate(0.030, 0), 0, 100 * MS) is running  # equal: no switch
    suspended = _run(0.020)
    assert choose(running, [suspended], None, 0, 100 * MS) is suspended
    assert choose(None, [], None, 0, 100 * MS) is None


def test_ageing_overdue_batches_go_first_and_are_never_preempted():
    # Deadline: head + max(max_age, TAIL_RATIO x work): 300 ms for a 100 ms batch.
    old = _run(0.100, head_ns=0, done=1)
    assert old.deadline_ns(100 * MS) == 300 * MS
    fresh = Candidate(0.001, 299 * MS)
    assert choose(old, [], fresh, 299 * MS, 100 * MS) is fresh  # before its deadline: SRPT
    assert choose(old, [], fresh, 300 * MS, 100 * MS) is old  # overdue and running: it goes on
    waiting = _run(0.100, head_ns=0, done=1)
    young = _run(0.002, head_ns=290 * MS)
    assert choose(young, [waiting], None, 300 * MS, 100 * MS) is waiting  # an overdue suspended batch goes first


class FakePass:
    """A resumable pass over payloads (int arrays): output row i = sum of payload i, in ``steps``
    steps; ``gate`` (if set) is waited on before every step."""

    def __init__(self, payloads, steps=4, gate=None, log=None):
        self.payloads, self.steps, self.gate, self.log = payloads, steps, gate, log
        self.done = 0
        self.closed = False

    def step(self) -> bool:
        assert not self.closed
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.log is not None:
            self.log.append(len(self.payloads[0]))
        self.done += 1
        return self.done == self.steps

    def result(self):
        return np.array([[float(np.sum(p))] for p in self.payloads])

    def close(self) -> None:
        self.closed = True


def whole(payloads, padded_len):
    return np.array([[float(np.sum(p))] for p in payloads])


def test_virtual_clock_a_short_batch_preempts_a_long_one_and_the_long_one_resumes():
    now = [0]
    batcher = DynamicBatcher(
        [whole],
        BUCKETS,
        BatchPolicy(max_wait_ms=0, short_lane_tokens=0),
        start=[lambda p, t: FakePass(p)],
        clock=lambda: now[0],
    )
    batcher.submit([np.ones(200, dtype=np.int64)])
    long_run, _, wide = batcher.next_run(0)
    assert long_run is not None and not wide
    long_run.steps = 6
    now[0] += 10 * MS
    assert batcher.yield_point(0, long_run) is long_run  # nothing queued: it goes on
    batcher.submit([np.ones(10, dtype=np.int64)])
    now[0] += 10 * MS
    short = batcher.yield_point(0, long_run)
    assert short is not long_run and [len(it.payload) for it in short.items] == [10]
    assert long_run.yields == 1 and long_run.done_steps == 2
    now[0] += 5 * MS
    batcher.batch_done(0, False)  # the short batch is done
    resumed, _, _ = batcher.next_run(0)
    assert resumed is long_run and long_run.preempted_ns == 5 * MS
    assert batcher.queue_depth == 0


def _threaded(gate, passes, log=None, workers=1, **policy):
    policy.setdefault("max_wait_ms", 0)
    policy.setdefault("short_lane_tokens", 0)
    dropped = []

    def start(payloads, padded):
        p = FakePass(payloads, gate=gate, log=log)
        passes.append(p)
        return p

    batcher = DynamicBatcher(
        [whole] * workers,
        BUCKETS,
        BatchPolicy(**policy),
        start=[start] * workers,
        on_drop=dropped.append,
    )
    batcher.start()
    return batcher, dropped


def _step_until(gate, cond, limit=50):
    """Let the worker through one step at a time until ``cond()``."""
    for _ in range(limit):
        if cond():
            return
        gate.set()
        gate.clear()
        threading.Event().wait(0.01)
    raise AssertionError("condition not reached")


def test_worker_threads_short_request_finishes_first_and_outputs_are_exact():
    gate = threading.Semaphore(0)
    passes: list[FakePass] = []
    log: list[int] = []

    class Steps:  # one permit per step
        def wait(self, timeout):
            return gate.acquire(timeout=timeout)

    batcher, _ = _threaded(Steps(), passes, log)
    try:
        long_f = batcher.submit([np.arange(200)])[0]
        gate.release()  # one step of the long pass
        while len(log) < 1:
            threading.Event().wait(0.005)
        short_f = batcher.submit([np.arange(10)])[0]
        for _ in range(20):
            gate.release()
        assert short_f.result(10).output[0] == float(np.arange(10).sum())
        assert long_f.result(10).output[0] == float(np.arange(200).sum())
        # The long pass ran 1-2 steps, then the whole short one, then the rest.
        first_short = log.index(10)
        assert log[first_short : first_short + 4] == [10] * 4 and log.count(200) == 4
        long_info = long_f.result().batch
        assert long_info.yields == 1 and long_info.preempted_ns > 0
        assert short_f.result().batch.yields == 0
        assert batcher.preemptive
    finally:
        for _ in range(50):
            gate.release()
        assert batcher.stop(5)


def test_cancelling_a_preempted_request_frees_its_pass():
    gate = threading.Event()
    passes: list[FakePass] = []
    log: list[int] = []
    batcher, dropped = _threaded(gate, passes, log)
    try:
        long_f = batcher.submit([np.arange(200)])[0]
        _step_until(gate, lambda: len(log) >= 1)
        short_f = batcher.submit([np.arange(10)])[0]
        _step_until(gate, lambda: log.count(10) >= 1)  # the long pass is suspended now
        assert long_f.cancel()  # its client left: the future was still cancellable
        gate.set()
        assert short_f.result(10).output[0] == float(np.arange(10).sum())
        assert batcher.stop(5)
        long_pass = next(p for p in passes if len(p.payloads[0]) == 200)
        assert long_pass.closed and long_pass.done < long_pass.steps  # dropped half-way, never finished
        assert dropped == [1]
    finally:
        gate.set()
        batcher.stop(5)


def test_stop_drains_suspended_work():
    gate = threading.Event()
    passes: list[FakePass] = []
    log: list[int] = []
    batcher, _ = _threaded(gate, passes, log)
    long_f = batcher.submit([np.arange(200)])[0]
    _step_until(gate, lambda: len(log) >= 1)
    short_f = batcher.submit([np.arange(10)])[0]
    _step_until(gate, lambda: log.count(10) >= 1)
    stopper = threading.Thread(target=batcher.stop, args=(10,))
    stopper.start()
    gate.set()
    stopper.join(10)
    assert short_f.result(0).output[0] == float(np.arange(10).sum())
    assert long_f.result(0).output[0] == float(np.arange(200).sum())


def test_a_failing_step_fails_only_the_bad_item():
    class Bad(FakePass):
        def step(self):
            if any(len(p) == 13 for p in self.payloads):
                raise RuntimeError("boom")
            return super().step()

    batcher = DynamicBatcher(
        [lambda p, t: whole(p, t) if all(len(x) != 13 for x in p) else 1 / 0],
        BUCKETS,
        BatchPolicy(max_wait_ms=50, short_lane_tokens=0),
        start=[lambda p, t: Bad(p)],
    )
    batcher.start()
    good, bad = batcher.submit([np.arange(12), np.arange(13)])
    assert good.result(10).output[0] == float(np.arange(12).sum())
    with pytest.raises(Exception, match="inference failed"):
        bad.result(10)
    assert batcher.stop(5)


def test_preempt_off_or_no_resumable_engine_runs_whole_batches():
    batcher = DynamicBatcher([whole], BUCKETS, BatchPolicy(preempt=False), start=[lambda p, t: FakePass(p)])
    assert not batcher.preemptive
    assert not DynamicBatcher([whole], BUCKETS, BatchPolicy(), start=[None]).preemptive


@pytest.mark.parametrize("preempt", [True, False])
def test_the_short_lane_is_off_when_every_worker_preempts(preempt):
    now = [0]
    batcher = DynamicBatcher(
        [whole, whole],
        BUCKETS,
        BatchPolicy(max_wait_ms=0, short_lane_tokens=16, preempt=preempt),
        start=[lambda p, t: FakePass(p)] * 2,
        clock=lambda: now[0],
    )
    batcher.submit([np.arange(50)])  # the 64 bucket: outside the lane
    run, _, _ = batcher.next_run(0)
    assert (run is not None) == preempt  # worker 0 takes long work only when it can yield
