"""Quality metrics: top-k agreement fast vs naive, cosine."""

import numpy as np

from openhood.engine.quant.evaluate import cosine_rows, quality, topk_agreement, topk_agreement_naive


def test_topk_agreement_matches_naive():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((40, 8)).astype(np.float32)
    noisy = ref + 0.3 * rng.standard_normal(ref.shape).astype(np.float32)
    assert topk_agreement(ref, noisy, 5) == topk_agreement_naive(ref, noisy, 5)
    assert topk_agreement(ref, ref, 5) == 1.0
    assert topk_agreement(ref, rng.standard_normal(ref.shape), 5) < 0.5


def test_quality_keys_and_cosine():
    a = np.eye(3, dtype=np.float32)
    np.testing.assert_allclose(cosine_rows(a, 2 * a), 1.0)
    q = quality(a, a, k=1)
    assert q == {"cos_mean": 1.0, "cos_min": 1.0, "top1": 1.0}
