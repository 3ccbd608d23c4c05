"""Backends and the Embedder: PyTorch parity, batching/padding invariance, errors."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.backends import load_backend
from openhood.backends.base import Backend
from openhood.models import UnsafeModelFormatError, default_model_dir

BACKENDS = ["numpy", "onnxruntime"]


@pytest.mark.parametrize("name", BACKENDS)
def test_cosine_vs_pytorch_reference(embedders, reference, name):
    texts, ref = reference
    got = embedders(name).embed(texts, batch_size=16)
    assert got.shape == ref.shape and got.dtype == np.float32
    cos = np.sum(got * ref, axis=1)  # both sides are unit vectors
    assert cos.min() >= 0.99999, f"worst text #{int(cos.argmin())}: cosine {cos.min():.7f}"


@pytest.mark.parametrize("name", BACKENDS)
def test_batched_equals_single(embedders, reference, name):
    emb = embedders(name)
    texts = reference[0][:12] + reference[0][-3:]  # short and truncated-long texts together
    batched = emb.embed(texts, batch_size=8)
    single = np.stack([emb.embed(t)[0] for t in texts])
    assert np.max(np.abs(batched - single)) <= 1e-5


@pytest.mark.parametrize("name", BACKENDS)
def test_padding_to_a_longer_bucket_changes_nothing(embedders, reference, name):
    emb = embedders(name)
    rb = emb.tokenizer.encode_batch(reference[0][:10], max_length=emb.max_length)
    tight, bucket = rb.pad(), rb.pad(128)
    a = emb.backend.embed(tight.input_ids, tight.attention_mask)
    b = emb.backend.embed(bucket.input_ids, bucket.attention_mask)
    assert bucket.input_ids.shape[1] == 128 > tight.input_ids.shape[1]
    assert np.max(np.abs(a - b)) <= 1e-5


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_protocol_and_health(embedders, name):
    be = embedders(name).backend
    assert isinstance(be, Backend)
    assert (be.name, be.dim, be.max_length) == (name, 384, 256)
    report = be.health()
    assert report["ok"] and report["dim"] == 384
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int32)  # int32 ids are accepted too
    out = be.embed(ids, np.ones_like(ids))
    assert out.shape == (1, 384) and out.dtype == np.float32
    assert abs(float(np.linalg.norm(out)) - 1.0) < 1e-5
    with pytest.raises(ValueError, match="differs"):
        be.embed(ids, np.ones((1, 5), np.int64))
    with pytest.raises(ValueError, match="2-D"):
        be.embed(ids[0], np.ones(4, np.int64))
    with pytest.raises(ValueError, match="exceeds"):
        be.embed(np.zeros((1, 600), np.int64), np.ones((1, 600), np.int64))
    assert be.embed(np.zeros((0, 4), np.int64), np.zeros((0, 4), np.int64)).shape == (0, 384)


def test_embedder_api(embedders):
    emb = embedders("numpy")
    assert (emb.dim, emb.max_length, emb.model_name) == (384, 256, "sentence-transformers/all-MiniLM-L6-v2")
    one = emb.embed("Hello world")
    assert one.shape == (1, 384)
    # the well-known first components of all-MiniLM-L6-v2("Hello world")
    assert np.allclose(one[0, :3], [-0.03447732, 0.03102314, 0.00673497], atol=1e-5)
    many = emb.embed(["a much longer sentence than the others, by far", "Hello world", "b"], batch_size=2)
    assert np.allclose(many[1], one[0], atol=1e-5)  # input order is kept despite length sorting
    assert emb.embed([]).shape == (0, 384)
    with pytest.raises(ValueError, match="batch_size"):
        emb.embed(["x"], batch_size=0)


def test_unfused_backend_matches_fused(embedders, reference):
    plain = load_backend("numpy", fusion=False)
    emb = embedders("numpy")
    rb = emb.tokenizer.encode_batch(reference[0][:8], max_length=256).pad()
    a = plain.embed(rb.input_ids, rb.attention_mask)
    b = emb.backend.embed(rb.input_ids, rb.attention_mask)
    assert np.max(np.abs(a - b)) <= 1e-5


def test_unsupported_precision_and_backend():
    with pytest.raises(ValueError, match="precision 'int3'"):
        load_backend("numpy", precision="int3")
    with pytest.raises(ValueError, match="unknown backend"):
        load_backend("tensorflow")


def test_pickle_weights_are_refused(tmp_path):
    src = default_model_dir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(UnsafeModelFormatError, match="pickle"):
        load_backend("numpy", tmp_path)


def test_non_mean_pooling_is_refused(tmp_path):
    from openhood.engine.bert import read_config

    src = default_model_dir()
    (tmp_path / "config.json").write_bytes((src / "config.json").read_bytes())
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}')
    with pytest.raises(ValueError, match="only mean pooling"):
        read_config(tmp_path)


@pytest.mark.parametrize("name", BACKENDS)
def test_replica_is_a_separate_engine_with_the_same_output(embedders, reference, name):
    emb = embedders(name)
    replica = emb.backend.replicate()
    assert isinstance(replica, Backend) and replica is not emb.backend
    batch = emb.tokenizer.encode_batch(reference[0][:6], max_length=emb.max_length).pad()
    np.testing.assert_array_equal(replica.embed(batch.input_ids, batch.attention_mask),
                                  emb.backend.embed(batch.input_ids, batch.attention_mask))
    if name == "numpy":  # weights shared, not loaded again; thread pool and scratch its own
        assert replica.graph is emb.backend.graph and replica.executor is not emb.backend.executor
    else:
        assert replica.session is not emb.backend.session
    replica.close()
    assert emb.backend.embed(batch.input_ids, batch.attention_mask).shape == (6, emb.dim)  # the original still works
