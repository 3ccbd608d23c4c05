import json

import numpy as np
import pytest

from openhood.loadtest.corpus import CorpusError, TextCorpus, synthetic_corpus


def test_same_seed_same_draws_other_seed_other_draws(corpus_file):
    c = TextCorpus.from_jsonl(corpus_file)
    assert len(c) == 300
    assert c.sampler(3).draw(50) == c.sampler(3).draw(50)
    assert c.sampler(3).draw(50) != c.sampler(4).draw(50)


def test_draws_keep_the_corpus_length_distribution(corpus_file):
    c = TextCorpus.from_jsonl(corpus_file)
    population = np.array([len(t) for t in c.texts])
    drawn = np.array([len(t) for t in c.sampler(0).draw(20_000)])
    # Kolmogorov-Smirnov distance between the two length distributions (CDF gap at every length).
    grid = np.unique(population)
    cdf_pop = np.searchsorted(np.sort(population), grid, side="right") / population.size
    cdf_drawn = np.searchsorted(np.sort(drawn), grid, side="right") / drawn.size
    assert np.abs(cdf_pop - cdf_drawn).max() < 0.02
    assert np.mean(drawn > 200) == pytest.approx(np.mean(population > 200), abs=0.01)  # the long tail is kept


def test_max_chars_and_limit(corpus_file):
    c = TextCorpus.from_jsonl(corpus_file, max_chars=20, limit=50)
    assert len(c) == 50
    assert max(len(t) for t in c.texts) == 20


def test_bad_corpora_give_clear_errors(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        TextCorpus.from_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(CorpusError, match=":2: not JSON"):
        TextCorpus.from_jsonl(bad)
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(CorpusError, match="no string field 'text'"):
        TextCorpus.from_jsonl(nofield)
    with pytest.raises(CorpusError, match="no non-empty"):
        TextCorpus(["", ""])


def test_synthetic_corpus_has_a_long_tail():
    lengths = np.array([len(t.split()) for t in synthetic_corpus(2000, seed=1).texts])
    assert np.percentile(lengths, 50) < 20 < np.percentile(lengths, 99)
