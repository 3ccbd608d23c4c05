"""``Embedder.encode``: sentence-transformers' signature and meanings over the same computation as
``embed`` (compared row for row), and against the committed PyTorch reference vectors."""

from __future__ import annotations

import io

import numpy as np
import pytest

from openhood import Embedder
from openhood.embedder import ProgressBar

TEXTS = ["a short one", "a somewhat longer sentence about batching and padding", "x", "the third text here", "fifth"]


@pytest.fixture(scope="module")
def mini():
    return Embedder.from_pretrained()


@pytest.fixture(scope="module")
def para(para_dir):
    emb = Embedder.from_pretrained(para_dir)
    assert not emb.model.output.unit_norm  # the model the normalize test needs: raw mean pooling
    return emb


def test_list_equals_embed(mini):
    got = mini.encode(TEXTS)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (len(TEXTS), mini.dim)
    np.testing.assert_array_equal(got, mini.embed(TEXTS))


def test_one_string_is_one_vector(mini):
    got = mini.encode("hello world")
    assert got.shape == (mini.dim,)
    np.testing.assert_array_equal(got, mini.embed(["hello world"])[0])


def test_convert_to_numpy_false_gives_a_list_of_rows(mini):
    got = mini.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(got, list) and len(got) == len(TEXTS)
    ref = mini.embed(TEXTS)
    for row, want in zip(got, ref, strict=True):
        assert row.shape == (mini.dim,)
        np.testing.assert_array_equal(row, want)


def test_batch_size_does_not_change_the_vectors(mini):
    # Different batches pad differently; padding is masked, so only float rounding differs.
    np.testing.assert_allclose(mini.encode(TEXTS, batch_size=2), mini.embed(TEXTS, batch_size=32), atol=1e-5)


def test_normalize_embeddings(para):
    raw = para.embed(TEXTS)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    got = para.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(para.encode(TEXTS), raw)  # off by default, as in sentence-transformers


def test_matches_the_pytorch_reference(mini, reference):
    texts, want = reference
    got = mini.encode(texts, batch_size=8, normalize_embeddings=True)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.9999


def test_progress_bar_over_batches(mini, capsys):
    mini.encode(TEXTS, batch_size=2, show_progress_bar=True)
    err = capsys.readouterr().err
    assert "Batches: 1/3" in err and "Batches: 3/3" in err and err.endswith("\n")
    mini.encode(TEXTS, batch_size=2)  # None: stderr is not a terminal under pytest
    mini.encode(TEXTS, batch_size=2, show_progress_bar=False)
    assert capsys.readouterr().err == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_default_bar_only_for_long_inputs_on_a_terminal():
    long, short, pipe = Terminal(), Terminal(), io.StringIO()
    for done in (1, 2, 3):
        ProgressBar(long, None).update(done, 3)
    ProgressBar(short, None).update(1, 1)
    ProgressBar(pipe, None).update(1, 3)
    assert "Batches: 3/3" in long.getvalue()
    assert short.getvalue() == "" and pipe.getvalue() == ""


def test_empty_and_refused_arguments(mini):
    assert mini.encode([]).shape == (0, mini.dim)
    with pytest.raises(ValueError, match="torch"):
        mini.encode(TEXTS, convert_to_tensor=True)
    with pytest.raises(ValueError, match="CPU"):
        mini.encode(TEXTS, device="cuda")
    with pytest.raises(ValueError, match="batch_size"):
        mini.encode(TEXTS, batch_size=0, show_progress_bar=True)
