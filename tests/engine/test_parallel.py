"""RowSplitter's thread hand-off: every range runs exactly once, errors reach the caller, a
share that no thread started is dropped instead of waited for."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from openhood.engine.kernels.parallel import RowSplitter


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_row_runs_once(threads):
    s = RowSplitter(threads)
    try:
        for n, chunk in ((1, 1), (7, 2), (100, 3), (64, 64)):
            seen = np.zeros(n, dtype=np.int64)
            lock = threading.Lock()

            def fn(a, b, seen=seen, lock=lock):
                with lock:
                    seen[a:b] += 1

            for _ in range(20):  # back-to-back regions reuse the same threads
                s.run_chunks(fn, n, chunk, 1, 0)
                s.run(fn, n, 1, 0)
            assert (seen == 40).all()
    finally:
        s.close()


def test_the_work_really_is_shared():
    s = RowSplitter(2)
    try:
        names = set()

        def fn(a, b):
            names.add(threading.current_thread().name)
            time.sleep(0.01)  # long enough that the worker takes a range before the caller is done

        s.run(fn, 2, 1, 0)
        assert len(names) == 2
    finally:
        s.close()


def test_worker_errors_reach_the_caller():
    s = RowSplitter(2)
    try:

        def fn(a, b):
            if threading.current_thread() is not threading.main_thread():
                raise ValueError("from the worker")
            time.sleep(0.02)  # the worker takes the other range meanwhile

        with pytest.raises(ValueError, match="from the worker"):
            s.run(fn, 2, 1, 0)
        s.run(lambda a, b: None, 2, 1, 0)  # the pool is still usable afterwards
    finally:
        s.close()


def test_a_share_no_thread_started_is_dropped():
    # The worker is held up (as by the other tenant of a loaded VM): the caller drains the whole
    # queue itself and returns without waiting for the worker to wake up.
    s = RowSplitter(2)
    try:
        gate = threading.Event()
        blocker_started = threading.Event()

        def hold(a, b):  # keep the worker busy in a first region started from another thread
            blocker_started.set()
            gate.wait(5)

        pool = s._pool
        assert pool is not None
        pool.post(lambda: hold(0, 1))
        blocker_started.wait(5)
        ran = []
        t0 = time.perf_counter()
        pool.post(lambda: ran.append("worker"))  # worker still busy: nobody starts this share
        pool.join()  # drops it instead of waiting the 5 s the worker is held
        assert time.perf_counter() - t0 < 1.0
        gate.set()
        time.sleep(0.05)
        assert ran == []  # a dropped share never runs later either
        pool.join()  # the held job's late "done" does not move the counter back
        s.run(lambda a, b: None, 2, 1, 0)
    finally:
        s.close()
