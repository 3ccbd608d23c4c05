"""SmoothQuant factors: the op against its reference, the exact-product identity, a smoothed
int8 layer in NumPy and ONNX Runtime, and the quantizer choosing smoothing only where it measured better."""

import numpy as np
import pytest
from quant_tiny_bert import tiny_graph, token_seqs
from test_end_to_end import assert_same_up_to_code_flips

from openhood.backends.ort_session import embed_batches, make_session, with_outputs
from openhood.engine.quant import ops
from openhood.engine.quant.evaluate import cosine_rows
from openhood.engine.quant.linear import Int8Linear, ObservingLinear
from openhood.engine.quant.observers import ChannelAbsMaxObserver
from openhood.engine.quant.quantizer import format_decisions, padded_batches, quantize, run_graph
from openhood.engine.quant.storage import INT8_FILE, apply_int8, read_int8, save_int8
from openhood.export.onnx_export import graph_to_onnx


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_factors_match_naive_and_keep_the_product(rng):
    x = rng.standard_normal((50, 24)).astype(np.float32)
    x[:, 3] *= 40  # an outlier channel
    w = rng.standard_normal((24, 16)).astype(np.float32)  # (in, out)
    amax = np.abs(x).max(0)
    for alpha in (0.25, 0.5, 0.8, 1.0):
        s = ops.smoothing_factors(amax, w, alpha)
        np.testing.assert_allclose(s, ops.smoothing_factors_naive(amax, w, alpha), rtol=1e-5)
        np.testing.assert_allclose((x / s) @ (s[:, None] * w), x @ w, rtol=1e-4, atol=1e-3)
    s = ops.smoothing_factors(amax, w, 0.5)
    # alpha 0.5 leaves activation and weight with the same per-channel maximum
    np.testing.assert_allclose(np.abs(x / s).max(0), np.abs(s[:, None] * w).max(1), rtol=1e-4)
    assert np.abs(x / s).max() / np.median(np.abs(x / s).max(0)) < amax.max() / np.median(amax)  # outlier shrank


def test_factors_edge_cases():
    w = np.ones((3, 2), np.float32)
    assert ops.smoothing_factors(np.array([0.0, 2.0, 4.0]), w, 0.5)[0] == 1.0  # never-active channel untouched
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            ops.smoothing_factors(np.ones(3), w, bad)
    with pytest.raises(ValueError, match="channels"):
        ops.smoothing_factors(np.ones(4), w, 0.5)
    obs = ChannelAbsMaxObserver()
    with pytest.raises(ValueError, match="no data"):
        obs.result()
    obs.update(np.array([[1.0, -5.0], [-2.0, 3.0]]))
    obs.update(np.array([[0.5, 0.5]]))
    assert obs.result().tolist() == [2.0, 5.0]


def _recorded_input(graph, name, ids):
    seen = {}

    class Recorder:
        def update(self, a):
            seen["x"] = a.copy()

    probe = graph.clone()
    probe.replace_linear(name, ObservingLinear(graph.node(name).linear, Recorder()))
    run_graph(probe, [(ids, np.ones_like(ids))])
    return seen["x"]  # (N, in)


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_smoothed_layer_numpy_and_onnx_runtime_agree_with_integer_arithmetic(mode):
    graph = tiny_graph()
    name = "layer.0.ffn.down"  # its input carries the tiny model's outlier unit
    lin = graph.node(name).linear
    ids = np.stack(token_seqs(2, seed=5, lo=6, hi=7))
    x = _recorded_input(graph, name, ids)
    s = ops.smoothing_factors(np.abs(x).max(0), lin.weight, 0.5)
    inv = (1.0 / s).astype(np.float32)
    codes, scale = ops.quantize_weight((lin.weight * s[:, None]).T, qmax=63)
    xs, xzp = ops.activation_qparams(float((x * inv).min()), float((x * inv).max()))
    layer = Int8Linear(codes, scale, lin.bias, mode, float(xs), int(xzp), smooth=s)
    # NumPy weight-only: 1/s folded into the weight, so it is x @ W up to weight rounding.
    np.testing.assert_allclose(layer.matmul(x), x @ lin.weight, rtol=0.05, atol=0.02 * np.abs(x @ lin.weight).max())
    # ONNX Runtime: Mul(x, 1/s) then the integer kernel = integer arithmetic on x / s.
    g = graph.clone()
    g.replace_linear(name, layer)
    model = with_outputs(graph_to_onnx(g), [f"{name}.y"])
    assert any(n.op_type == "Mul" and n.name.startswith(f"{name}.smooth") for n in model.graph.node)
    y = make_session(model).run([f"{name}.y"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    xq_scale, xq_zp = (xs, xzp) if mode == "static" else ops.dynamic_qparams(x * inv)
    expect = ops.int8_matmul(ops.quantize_activation(x * inv, xq_scale, xq_zp), xq_scale, xq_zp, codes, scale)
    np.testing.assert_allclose(y.reshape(len(expect), -1), expect, rtol=1e-4, atol=1e-4)
    emulated = Int8Linear(codes, scale, lin.bias, mode, float(xs), int(xzp), emulate=True, smooth=s).matmul(x)
    np.testing.assert_allclose(emulated, expect, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="smoothing factors"):
        Int8Linear(codes, scale, lin.bias, mode, float(xs), int(xzp), smooth=s[:-1])


@pytest.fixture(scope="module")
def smoothed_run(tmp_path_factory):
    graph = tiny_graph()
    res = quantize(
        graph,
        token_seqs(96, seed=1),
        token_seqs(48, seed=2),
        pad_id=0,
        target_cosine=0.999,
        smooth_alpha=0.5,
        log=lambda s: None,
    )
    path = tmp_path_factory.mktemp("int8s") / INT8_FILE
    save_int8(path, graph, res, {"smooth_alpha": 0.5})
    return graph, res, path


def test_quantizer_measures_both_variants_and_keeps_the_better(smoothed_run):
    _, res, _ = smoothed_run
    assert res.holdout_quality["cos_mean"] >= 0.999
    for d in res.decisions:
        assert d.smooth_static_error > 0 and d.smooth_dynamic_error > 0  # measured, not defaulted
        if d.mode == "fp32":
            assert not d.smooth
            continue
        plain = d.static_error if d.mode == "static" else d.dynamic_error
        smooth = d.smooth_static_error if d.mode == "static" else d.smooth_dynamic_error
        assert d.smooth == (smooth < plain)
        assert (d.layer in res.smooth) == d.smooth
    assert "smooth st" in format_decisions(res.decisions)


def test_smoothed_plan_round_trips_and_runs_the_same_in_onnx_runtime(smoothed_run):
    graph, res, path = smoothed_run
    tensors, plan, _ = read_int8(path)
    for d in res.decisions:
        assert (f"{d.layer}.smooth" in tensors) == d.smooth
        if d.smooth:
            np.testing.assert_array_equal(tensors[f"{d.layer}.smooth"], res.smooth[d.layer])
            assert plan["layers"][d.layer]["smooth"] is True
    fresh = padded_batches(token_seqs(32, seed=4), pad_id=0)
    g8 = apply_int8(graph, path)
    onnx_model = graph_to_onnx(g8)
    ort_out = embed_batches(make_session(onnx_model), fresh)
    emulated = run_graph(apply_int8(graph, path, emulate=True), fresh)
    assert_same_up_to_code_flips(cosine_rows(ort_out, emulated))


def test_missing_factors_in_a_file_are_refused(smoothed_run, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    graph, res, path = smoothed_run
    # The seeded tiny model's plan smooths some layers; without one this test would check nothing.
    assert res.smooth, "no smoothed layer in the plan: re-seed smoothed_run so this test has a file to break"
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys() if not k.endswith(".smooth")}  # noqa: SIM118 -- safe_open is not iterable
    broken = tmp_path / INT8_FILE
    save_file(tensors, str(broken), metadata=meta)
    with pytest.raises(ValueError, match="smooth is missing"):
        apply_int8(graph, broken)
