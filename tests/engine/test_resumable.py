"""A pass in layer groups (``Executor.start`` / ``NumpyBackend.start``): interrupted by other
passes on the same engine and resumed, it gives the same bits as one uninterrupted call."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.backends.numpy_backend import NumpyBackend
from openhood.engine.graph.fusion import fuse
from openhood.engine.graph.graph import Graph, Node
from openhood.engine.graph.runtime import layer_groups
from openhood.engine.models.bert import build_graph, read_weights


@pytest.fixture(scope="module")
def graph(bert):
    return fuse(build_graph(bert.config, read_weights(bert.folder), head=False))


def _feeds(tokenizer, texts):
    padded = tokenizer.encode_batch(texts, max_length=128).pad()
    return {"input_ids": padded.input_ids.astype(np.int64), "attention_mask": padded.attention_mask.astype(np.int64)}


def test_layer_groups_split_at_numbered_layers():
    names = ["embeddings", "mask", "layer.0.a", "layer.0.b", "layer.1.a", "layer.10.a", "pool"]
    nodes = [Node(n, "Add", (), (n,)) for n in names]
    assert layer_groups(Graph(nodes, (), ())) == [0, 4, 5]  # embeddings join layer 0, pooling the last
    assert layer_groups(Graph([Node("stem", "Add", (), ("x",))], (), ())) == [0]


@pytest.mark.parametrize("threads", [1, 2])
def test_preempted_and_resumed_pass_is_bit_identical(graph, tokenizer, threads):
    backend = NumpyBackend(graph, threads=threads)
    try:
        # A long padded batch (packed: its texts differ in length) and a short one.
        long_feeds = _feeds(tokenizer, ["a long sentence " * 20, "shorter text here", "mid " * 30])
        short_feeds = _feeds(tokenizer, ["hi", "a short one"])
        backend.run(long_feeds)  # warm-up: a fresh 2-thread executor's first call may differ in the last bit
        whole_long = backend.run(long_feeds)["token_embeddings"]
        whole_short = backend.run(short_feeds)["token_embeddings"]

        long_pass = backend.start(long_feeds)
        assert long_pass.steps == graph.meta["layers"]  # one group per encoder layer
        assert not long_pass.step() and not long_pass.step()  # two layers in: preempted here
        short_pass = backend.start(short_feeds)
        while not short_pass.step():
            pass
        assert not long_pass.step()  # one more layer, then preempted again by a whole call
        other = backend.run(short_feeds)["token_embeddings"]
        while not long_pass.step():
            pass
        np.testing.assert_array_equal(long_pass.result()["token_embeddings"], whole_long)
        np.testing.assert_array_equal(short_pass.result()["token_embeddings"], whole_short)
        np.testing.assert_array_equal(other, whole_short)
    finally:
        backend.close()


def test_closed_pass_lets_go_of_its_state(graph, tokenizer):
    backend = NumpyBackend(graph, threads=1)
    try:
        p = backend.start(_feeds(tokenizer, ["some words to run"]))
        assert not p.step()
        p.close()
        with pytest.raises(RuntimeError, match="closed"):
            p.step()
    finally:
        backend.close()
