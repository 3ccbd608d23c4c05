"""ONNX export of our own graph: fused and unfused BERT, the MLP, and refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from openhood.backends.ort_session import make_session
from openhood.engine.graph.fusion import fuse
from openhood.engine.graph.runtime import Executor
from openhood.engine.models.bert import load_bert
from openhood.engine.models.mlp import build_mlp
from openhood.export.onnx_export import export_onnx, graph_to_onnx
from openhood.models import default_model_dir


def run_numpy(graph, feeds):
    with Executor(graph, threads=1) as ex:
        return next(iter(ex.run(feeds).values()))


def run_ort(model, feeds):
    return make_session(model.SerializeToString(), threads=1).run(None, feeds)[0]


@pytest.fixture(scope="module")
def bert():
    return load_bert(default_model_dir())


def test_unfused_bert_export_matches_engine_and_writes_a_file(bert, tmp_path):
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 29000, size=(2, 9)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    path = export_onnx(bert.graph, tmp_path / "sub" / "model.onnx")
    model = onnx.load(str(path))
    names = {i.name for i in model.graph.initializer}
    assert {"layer.0.attention.query.weight", "layer.5.ffn.down.bias"} <= names
    assert not list(tmp_path.glob("**/*.partial"))
    assert np.max(np.abs(run_ort(model, feeds) - run_numpy(bert.graph, feeds))) <= 1e-5


def test_fused_export_keeps_linear_names(bert):
    model = graph_to_onnx(fuse(bert.graph))
    weights = {i.name: i for i in model.graph.initializer}
    assert list(weights["layer.0.attention.qkv.weight"].dims) == [384, 1152]  # (in, out) for the int8 rewrite
    ops = {n.op_type for n in model.graph.node}
    assert {"Erf", "LayerNormalization", "Softmax", "Gather"} <= ops


def test_mlp_export_with_relu_and_softmax_fusion():
    graph = fuse(build_mlp((20, 16, 4)), ["linear_activation"])
    x = np.random.default_rng(1).standard_normal((5, 20)).astype(np.float32)
    got = run_ort(graph_to_onnx(graph), {"x": x})
    assert np.max(np.abs(got - run_numpy(graph, {"x": x}))) <= 1e-6


def test_layer_without_onnx_support_is_refused():
    graph = build_mlp((4, 3, 2))

    class Opaque:
        in_features, out_features, bias = 4, 3, None

    graph.nodes[0].linear = Opaque()
    with pytest.raises(NotImplementedError, match="not a Linear kind"):
        graph_to_onnx(graph)
