"""A tiny model quantized end to end: calibrate → sensitivity → plan → ONNX + safetensors → load."""

import json

import numpy as np
import pytest

from openhood.engine.quant import ops
from openhood.engine.quant.calibration import CalibrationSetError
from openhood.engine.quant.evaluate import cosine_rows, embed_batches, make_session, quality, with_outputs
from openhood.engine.quant.quantizer import format_decisions, quantize
from openhood.engine.quant.storage import load_quantized, read_metadata, save_fp16, save_int8
from openhood.export.qdq import LayerQuant, linear_sites, quantize_graph
from quant_tiny_model import tiny_checkpoint, tiny_onnx, token_batches


@pytest.fixture(scope="module")
def tiny():
    ckpt = tiny_checkpoint()
    return ckpt, tiny_onnx(ckpt)


@pytest.fixture(scope="module")
def result(tiny):
    _, model = tiny
    logs = []
    res = quantize(model, token_batches(96, seed=1), token_batches(48, seed=2), method="percentile",
                   target_cosine=0.999, log=logs.append)
    return res, logs


def test_plan_meets_target_on_holdout_and_generalizes(tiny, result):
    _, model = tiny
    res, logs = result
    assert res.holdout_quality["cos_mean"] >= 0.999
    assert any(line.startswith("plan:") for line in logs)
    table = format_decisions(res.decisions)
    assert all(d.layer in table and d.reason for d in res.decisions)
    assert {d.layer for d in res.decisions} == {"layer.0.proj", "layer.0.up", "layer.0.down"}
    # Fresh texts the quantizer never saw.
    fresh = token_batches(64, seed=3)
    q = quality(embed_batches(make_session(model), fresh), embed_batches(make_session(res.model), fresh), k=5)
    assert q["cos_mean"] > 0.995 and q["top5"] >= 0.8


def test_graph_uses_integer_kernels_for_quantized_layers(result):
    res, _ = result
    ops_used = [n.op_type for n in res.model.graph.node]
    n_int8 = sum(d.mode != "fp32" for d in res.decisions)
    assert ops_used.count("MatMulInteger") == n_int8
    assert ops_used.count("MatMul") == len(res.decisions) - n_int8
    assert "embeddings.word.weight" not in {t.name for t in res.model.graph.initializer}  # table is int8 now


def test_static_layer_in_ort_equals_numpy_emulation(tiny):
    # One static layer through ONNX Runtime vs ops.int8_matmul on the same codes: 8-bit codes
    # stored as u8 + zero point 128 are exact on every CPU; s8 codes are exact everywhere only
    # at 7 bits (u8×s8 AVX2 kernels saturate int16 pair sums with full 8-bit weights).
    ckpt, model = tiny
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 1000, (2, 5))
    mask = np.ones_like(ids)
    x = ckpt["embeddings.word_embeddings.weight"][ids].reshape(10, -1)  # (B*T, D)
    xs, xzp = ops.activation_qparams(-0.3, 0.3)  # narrower than the data: some values clip
    for encoding, qmax in (("u8", 127), ("s8", 63)):
        codes, scale = ops.quantize_weight(np.concatenate([ckpt["proj.a.weight"], ckpt["proj.b.weight"]]), qmax=qmax)
        expect = ops.int8_matmul(ops.quantize_activation(x, xs, xzp), xs, xzp, codes, scale)  # (10, 2D)
        lq = {"layer.0.proj": LayerQuant("static", codes, scale, float(xs), int(xzp))}
        q = with_outputs(quantize_graph(model, lq, None, weight_encoding=encoding), ["layer.0.proj.acc_f"])
        acc = make_session(q).run(["layer.0.proj.acc_f"], {"input_ids": ids, "attention_mask": mask})[0]
        np.testing.assert_allclose(acc.reshape(10, -1) * np.float32(xs) * scale, expect, rtol=1e-5, atol=1e-6)


def test_safetensors_roundtrip_and_metadata(tiny, result, tmp_path):
    ckpt, model = tiny
    res, _ = result
    path = save_int8(tmp_path / "model.int8.safetensors", ckpt, model, res, {"method": "percentile"})
    meta = read_metadata(path)
    plan = json.loads(meta["plan"])
    assert set(plan["layers"]) == {"layer.0.proj", "layer.0.up", "layer.0.down"}
    assert json.loads(meta["layer_tensors"])["layer.0.proj"] == ["proj.a.weight", "proj.b.weight"]
    weights, _ = load_quantized(path)
    assert set(weights) == set(ckpt)  # the source checkpoint's names, nothing extra
    for name in ("embeddings.word_embeddings.weight", "proj.a.weight", "proj.b.weight"):
        step = np.abs(ckpt[name]).max(axis=1) / 127
        assert np.all(np.abs(weights[name] - ckpt[name]).max(axis=1) <= step / 2 * (1 + 1e-5))
    np.testing.assert_array_equal(weights["proj.bias"], ckpt["proj.bias"])
    int8_bytes = path.stat().st_size
    fp16 = save_fp16(tmp_path / "model.fp16.safetensors", ckpt)
    w16, _ = load_quantized(fp16)
    np.testing.assert_allclose(w16["up.weight"], ckpt["up.weight"], rtol=1e-3, atol=1e-4)
    fp32_bytes = sum(t.nbytes for t in ckpt.values())
    assert int8_bytes < 0.35 * fp32_bytes and fp16.stat().st_size < 0.55 * fp32_bytes


def test_quantize_refuses_empty_or_tiny_calibration(tiny):
    _, model = tiny
    with pytest.raises(CalibrationSetError, match="empty"):
        quantize(model, [], token_batches(8), min_samples=64, log=lambda s: None)
    with pytest.raises(CalibrationSetError, match="fewer than the minimum of 64"):
        quantize(model, token_batches(10), token_batches(8), min_samples=64, log=lambda s: None)


def test_unknown_mode_is_refused(tiny):
    _, model = tiny
    site = linear_sites(model)[0]
    with pytest.raises(ValueError, match="unknown mode"):
        quantize_graph(model, {site.layer: LayerQuant("int4")})


def test_fp32_plan_is_identity(tiny):
    _, model = tiny
    batches = token_batches(8)
    a = embed_batches(make_session(model), batches)
    b = embed_batches(make_session(quantize_graph(model, {})), batches)
    assert np.all(cosine_rows(a, b) > 1 - 1e-6)
