"""Backends and the Embedder: PyTorch parity, batching/padding invariance, the protocol, errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from openhood.backends import Backend, load_backend, prepare_graph
from openhood.engine.models.bert import load_bert
from openhood.formats.weights import UnsafeModelFormatError
from openhood.models import default_model_dir

BACKENDS = ["numpy", "onnxruntime"]


def feeds_of(padded) -> dict:
    return {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask}


def pooled(emb, backend, padded) -> np.ndarray:
    """The served path on one padded batch: backend → the model's postprocessor (pooling)."""
    feeds = feeds_of(padded)
    return emb.model.postprocessor(backend.run(feeds), feeds)


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
    a, b = pooled(emb, emb.backend, tight), pooled(emb, emb.backend, bucket)
    assert bucket.input_ids.shape[1] == 128 > tight.input_ids.shape[1]
    assert np.max(np.abs(a - b)) <= 1e-5


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_protocol_runs_named_inputs_to_named_outputs(embedders, name):
    be = embedders(name).backend
    assert isinstance(be, Backend)
    assert (be.name, be.precision) == (name, "fp32")
    assert be.input_names == ("input_ids", "attention_mask") and be.output_names == ("token_embeddings",)
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int32)  # int32 ids are accepted too
    out = be.run({"input_ids": ids, "attention_mask": np.ones_like(ids)})
    states = out["token_embeddings"].reshape(1, 4, -1)  # (B, T, C): the NumPy engine's are (B*T, C)
    assert states.shape == (1, 4, 384) and states.dtype == np.float32
    with pytest.raises(ValueError, match="missing inputs"):
        be.run({"input_ids": ids})
    with pytest.raises(ValueError, match="batch size"):
        be.run({"input_ids": ids, "attention_mask": np.ones((2, 4), np.int64)})


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
    emb = embedders("numpy")
    model = load_bert(default_model_dir(), head=False)
    plain = load_backend("numpy", lambda: prepare_graph(model.graph, fusion=False))
    rb = emb.tokenizer.encode_batch(reference[0][:8], max_length=256).pad()
    assert np.max(np.abs(pooled(emb, plain, rb) - pooled(emb, emb.backend, rb))) <= 1e-5


def test_unsupported_precision_and_backend():
    model = load_bert(default_model_dir(), head=False)
    with pytest.raises(ValueError, match="precision 'int3'"):
        prepare_graph(model.graph, precision="int3")
    with pytest.raises(ValueError, match="unknown backend"):
        load_backend("tensorflow", lambda: model.graph)


def test_pickle_weights_are_refused(tmp_path):
    src = default_model_dir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(UnsafeModelFormatError, match="pickle"):
        load_bert(tmp_path)


def test_non_mean_pooling_is_refused(tmp_path):
    from openhood.engine.models.bert import read_config

    src = default_model_dir()
    (tmp_path / "config.json").write_bytes((src / "config.json").read_bytes())
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
    )
    with pytest.raises(ValueError, match="only mean pooling"):
        read_config(tmp_path)


@pytest.mark.parametrize("name", BACKENDS)
def test_replica_is_a_separate_engine_with_the_same_output(embedders, reference, name):
    emb = embedders(name)
    replica = emb.backend.replicate()
    assert isinstance(replica, Backend) and replica is not emb.backend
    batch = emb.tokenizer.encode_batch(reference[0][:6], max_length=emb.max_length).pad()
    # Both engines warmed once on another input, as the server warms every engine before serving:
    # a fresh 2-thread NumPy executor's very first call differed from later ones by <= 3e-6 on the
    # Zen 3 CI machine (later calls, and every other engine, are bit-identical).
    warm = emb.tokenizer.encode_batch(["a warm-up sentence"] * 3, max_length=emb.max_length).pad()
    pooled(emb, replica, warm)
    np.testing.assert_array_equal(pooled(emb, replica, batch), pooled(emb, emb.backend, batch))
    if name == "numpy":  # weights shared, not loaded again; thread pool and scratch its own
        assert replica.graph is emb.backend.graph and replica.executor is not emb.backend.executor
    else:
        assert replica.session is not emb.backend.session
    replica.close()
    assert pooled(emb, emb.backend, batch).shape == (6, emb.dim)  # the original still works


def test_embedder_workers_run_batches_side_by_side_with_the_same_bits(reference):
    from openhood import Embedder

    texts = list(reference[0][:30])
    one = Embedder.from_pretrained(threads=1)
    three = Embedder.from_pretrained(threads=1, workers=3)
    assert three.model.workers == 3 and three.model.backends[1].graph is three.model.backends[0].graph
    seen: set[str] = set()
    run = three.model.run
    other_ran = threading.Event()

    def spy(worker, rows, padded_len):
        seen.add(threading.current_thread().name)
        if threading.current_thread() is threading.main_thread():
            other_ran.wait(30)  # the calling thread waits until a pool worker has taken a batch
        else:
            other_ran.set()
        return run(worker, rows, padded_len)

    three.model.run = spy
    assert three.embed(texts, batch_size=4).tobytes() == one.embed(texts, batch_size=4).tobytes()
    assert len(seen) >= 2  # more than the calling thread ran batches
    assert three.embed(texts[:1]).tobytes() == one.embed(texts[:1]).tobytes()  # fewer batches than workers
    three.close()
    with pytest.raises(ValueError, match="workers"):
        Embedder.from_pretrained(workers=0)
