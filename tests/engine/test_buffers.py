"""BufferPool: activations reused across nodes and calls, never an array the caller holds."""

from __future__ import annotations

import numpy as np

from openhood.engine.graph.buffers import BufferPool
from openhood.engine.graph.runtime import Executor
from openhood.engine.models import efficientnet


def test_released_buffer_is_taken_again_and_foreign_arrays_are_ignored():
    pool = BufferPool()
    a = pool.take((4, 8))
    assert a.shape == (4, 8) and a.dtype == np.float32 and a.flags.c_contiguous
    pool.release(a)
    b = pool.take((2, 16))  # same size: the same memory
    assert np.shares_memory(a, b)
    c = pool.take((3, 3))  # nothing free: a new buffer
    assert not np.shares_memory(b, c)
    feed = np.zeros((4, 8), np.float32)
    pool.release(feed)  # never lent: not kept
    pool.release(b.reshape(-1))  # a different view of a lent array: not the one lent, ignored
    assert pool.nbytes == 0
    pool.release(b)
    small = pool.take((2, 2))  # best fit reuses the larger free buffer rather than allocating
    assert np.shares_memory(small, b)


def test_outputs_of_one_call_survive_the_next(effnet, vision_reference):
    paths = vision_reference[0]
    x = effnet.pixels([p.read_bytes() for p in paths[:2]])
    with Executor(effnet.graph(), threads=2) as ex:
        first = ex.run({efficientnet.INPUT_NAME: x[:1]})
        kept = {k: v.copy() for k, v in first.items()}
        held = ex.buffers.nbytes
        second = ex.run({efficientnet.INPUT_NAME: x[1:]})
        assert held > 0 and ex.buffers.nbytes == held  # the second call allocated nothing new
        third = ex.run({efficientnet.INPUT_NAME: x[:1]})
    for k in kept:
        assert np.array_equal(first[k], kept[k])  # the pool never handed an output out again
        assert np.array_equal(third[k], kept[k])
        assert not np.array_equal(second[k], kept[k])
