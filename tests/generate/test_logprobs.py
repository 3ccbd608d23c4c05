"""logprobs: the fast path (logsumexp + argpartition) equals the naive full float64 log-softmax and
stable sort, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.generate.generator import GenerationConfig
from openhood.generate.logprobs import MAX_TOP_LOGPROBS, token_logprobs, token_logprobs_reference


@pytest.mark.parametrize("k", [0, 1, 5, MAX_TOP_LOGPROBS])
def test_fast_logprobs_equal_the_reference(k):
    rng = np.random.default_rng(k)
    row = (rng.standard_normal(49152) * 4).astype(np.float32)
    row[[10, 20, 30]] = row.max()  # a three-way tie at the top: lower ids first, as a stable sort
    for token in (10, 7, 49151):
        fast, ref = token_logprobs(row, token, k), token_logprobs_reference(row, token, k)
        assert [t for t, _ in fast.top] == [t for t, _ in ref.top]
        np.testing.assert_allclose(
            [fast.logprob, *(lp for _, lp in fast.top)], [ref.logprob, *(lp for _, lp in ref.top)], rtol=0, atol=1e-12
        )
    everything = token_logprobs(row, 0, row.size).top  # k = V: the whole distribution
    assert np.exp([lp for _, lp in everything]).sum() == pytest.approx(1.0, abs=1e-9)


def test_logprobs_out_of_range_is_refused():
    with pytest.raises(ValueError, match="logprobs"):
        GenerationConfig(logprobs=MAX_TOP_LOGPROBS + 1)
