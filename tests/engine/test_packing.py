"""Padding-free execution (engine.graph.packing): the packed run equals the padded graph's on real rows."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.graph import packing
from openhood.engine.graph.fusion import CNN_PASSES, PASSES, fuse
from openhood.engine.graph.packing import TokenPacking, pack_naive
from openhood.engine.graph.runtime import Executor
from openhood.engine.kernels import ops


def test_from_mask_layout():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 1]])
    p = TokenPacking.from_mask(mask)
    assert p is not None and p.tokens == 7 and (p.batch, p.seq) == (3, 4)
    assert p.rows.tolist() == [0, 1, 2, 4, 8, 9, 11]
    assert p.positions.tolist() == [0, 1, 2, 0, 0, 1, 3]  # a token keeps its column as position id
    assert p.starts.tolist() == [0, 3, 4, 7]
    assert p.padding == pytest.approx(5 / 12)


@pytest.mark.parametrize(
    "mask",
    [
        np.ones((3, 8), dtype=np.int64),  # nothing padded
        np.array([[1] * 40, [1] * 39 + [0]]),  # 1.25% padding: below MIN_PADDING, not worth copying
        np.array([[1, 1, 0], [0, 0, 0]]),  # a text with no token: the padded path keeps its behaviour
    ],
)
def test_from_mask_declines(mask):
    assert TokenPacking.from_mask(mask) is None


def test_switch_off(monkeypatch):
    monkeypatch.setattr(packing, "PACK_TOKENS", False)
    assert TokenPacking.from_mask(np.array([[1, 0, 0]])) is None


def test_pack_unpack_mean_match_references():
    rng = np.random.default_rng(0)
    mask = (rng.random((5, 9)) < 0.6).astype(np.int64)
    mask[:, 0] = 1
    hidden = rng.standard_normal((5, 9, 7)).astype(np.float32)
    p = TokenPacking.from_mask(mask, min_padding=0.0)
    assert p is not None
    packed = p.pack(hidden.reshape(45, 7))
    np.testing.assert_array_equal(packed, pack_naive(hidden, mask))
    back = p.unpack(packed).reshape(5, 9, 7)
    np.testing.assert_array_equal(back[mask > 0], hidden[mask > 0])
    assert not back[mask == 0].any()
    np.testing.assert_allclose(p.mean(packed), ops.mean_pool(hidden, mask), rtol=1e-6, atol=1e-6)


def _feeds(rng, lengths, t, holes=False):
    ids = rng.integers(1000, 29000, size=(len(lengths), t))
    mask = np.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    if holes:  # a mask that is not a prefix: packing keeps the padded graph's semantics anyway
        mask[0, 2] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _run(graph, feeds, packed, monkeypatch):
    monkeypatch.setattr(packing, "PACK_TOKENS", packed)
    with Executor(graph, threads=2) as ex:
        return next(iter(ex.run(feeds).values()))


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("holes", [False, True])
def test_packed_tokens_equal_padded(bert, fused, holes, monkeypatch):
    from openhood.engine.models.bert import build_graph, read_config, read_weights

    cfg = read_config(bert.folder)
    graph = build_graph(cfg, read_weights(bert.folder), head=False)
    if fused:
        graph = fuse(graph, [p for p in PASSES if p not in CNN_PASSES])
    feeds = _feeds(np.random.default_rng(1), [31, 7, 19, 3], 31, holes)
    padded = _run(graph, feeds, False, monkeypatch)
    packed = _run(graph, feeds, True, monkeypatch)
    keep = feeds["attention_mask"].reshape(-1) > 0
    assert packed.shape == padded.shape  # (B*T, C): the caller's layout
    np.testing.assert_allclose(packed[keep], padded[keep], rtol=1e-4, atol=2e-5)
    assert not packed[~keep].any()  # padding rows are zero, never stale memory


def test_packed_pooled_head_equals_padded(bert, monkeypatch):
    feeds = _feeds(np.random.default_rng(2), [25, 4, 11], 25)
    padded = _run(bert.graph, feeds, False, monkeypatch)  # head=True: MeanPool + L2Normalize
    packed = _run(bert.graph, feeds, True, monkeypatch)
    assert packed.shape == (3, 384)
    np.testing.assert_allclose(packed, padded, rtol=1e-4, atol=1e-6)
