"""Every fusion pass leaves the output unchanged (<= 1e-5) and really rewrites the graph."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.graph.fusion import CNN_PASSES, PASSES, fuse
from openhood.engine.graph.runtime import Executor
from openhood.engine.kernels.linear import Linear
from openhood.engine.models.mlp import build_mlp


def run(graph, feeds):
    with Executor(graph, threads=2) as ex:
        return next(iter(ex.run(feeds).values()))


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(3)
    ids = rng.integers(1000, 29000, size=(3, 21))
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def unfused_out(bert, feeds):
    return run(bert.graph, feeds)


def ops_of(graph):
    return [n.label for n in graph.nodes]


@pytest.mark.parametrize("name", [n for n in PASSES if n not in CNN_PASSES])
def test_each_bert_pass_is_exact(bert, feeds, unfused_out, name):
    fused = PASSES[name](bert.graph)
    assert len(fused.nodes) < len(bert.graph.nodes)
    assert len(bert.graph.nodes) == 3 + 12 * 6 + 2  # the input graph was not mutated
    assert np.max(np.abs(run(fused, feeds) - unfused_out)) <= 1e-5


def test_all_passes_bert(bert, feeds, unfused_out):
    fused = fuse(bert.graph)
    labels = ops_of(fused)
    assert labels.count("Linear") == 6 and labels.count("Linear+Gelu") == 6
    assert labels.count("LinearAddLayerNorm") == 12
    assert "Gelu" not in labels and "Add" not in labels
    assert list(fused.linears())[:4] == [
        "layer.0.attention.qkv",
        "layer.0.attention.out",
        "layer.0.ffn.up",
        "layer.0.ffn.down",
    ]
    assert fused.node("layer.0.attention.self").attrs["scale"] == 1.0  # folded into the query weights
    assert np.max(np.abs(run(fused, feeds) - unfused_out)) <= 1e-5


def test_mlp_relu_and_softmax_fusions():
    graph = build_mlp((784, 256, 10))
    x = np.random.default_rng(0).standard_normal((64, 784)).astype(np.float32)
    ref = run(graph, {"x": x})
    fused = fuse(graph, ["linear_activation"])
    assert ops_of(fused) == ["Linear+Relu", "Linear+Softmax"]
    out = run(fused, {"x": x})
    assert np.max(np.abs(out - ref)) <= 1e-5
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-5)


def test_replace_linear_by_name_survives_fusion(bert, feeds, unfused_out):
    fused = fuse(bert.graph)
    old = fused.node("layer.2.ffn.up").linear
    fused.replace_linear("layer.2.ffn.up", Linear(old.weight.copy(), old.bias.copy()))
    assert np.max(np.abs(run(fused, feeds) - unfused_out)) <= 1e-5
    with pytest.raises(ValueError, match="expected 384->1536"):
        fused.replace_linear("layer.2.ffn.up", Linear(np.zeros((384, 10), np.float32)))
    with pytest.raises(ValueError, match="no Linear"):
        fused.replace_linear("layer.2.attention.self", old)


def test_unknown_pass_is_refused(bert):
    with pytest.raises(ValueError, match="unknown fusion passes"):
        fuse(bert.graph, ["nope"])
