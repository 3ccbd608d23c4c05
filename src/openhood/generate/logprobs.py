"""Per-token log-probabilities for ``logprobs`` / ``top_logprobs``: a float64 log-softmax of one row.

The values are those of the engine's raw logits (before ``logit_bias``, temperature, top-k/top-p
or a grammar's mask), as OpenAI and vLLM report them: what the model thinks of each token, not
what the sampler was allowed to draw. ``token_logprobs`` is the fast path the scheduler runs on
its worker thread for the sequences that asked: one ``logsumexp`` over the vocabulary and an
``argpartition`` for the k best, never a full sort; ``token_logprobs_reference`` is the
textbook full log-softmax + stable sort it is tested against. The trade-off: ~0.3 ms per token
(49k-entry float64 pass) for the sequences that asked, nothing for the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOP_LOGPROBS = 20  # OpenAI's limit on top_logprobs (chat) and the legacy logprobs (completions)


@dataclass(frozen=True)
class TokenLogprobs:
    """One sampled token's log-probability and the ``top`` most likely tokens at that position."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first; ties by lower id


def _log_normalizer(x: np.ndarray) -> float:
    """log(sum(exp(x))) in float64, stable (x: (V,) float64)."""
    m = float(x.max())
    return m + float(np.log(np.exp(x - m).sum()))


def token_logprobs(row: np.ndarray, token: int, k: int) -> TokenLogprobs:
    """``row``: (V,) logits of one position; ``token``: the sampled id; ``k``: how many alternatives."""
    x = row.astype(np.float64)
    z = _log_normalizer(x)
    top: tuple[tuple[int, float], ...] = ()
    if k > 0:
        k = min(k, x.size)
        kth = -np.partition(-x, k - 1)[k - 1]  # the k-th largest logit
        above = np.flatnonzero(x > kth)
        cand = np.concatenate([above, np.flatnonzero(x == kth)[: k - above.size]])  # ties: lowest ids, as a stable sort
        order = cand[np.lexsort((cand, -x[cand]))]  # by logit descending, then by id
        top = tuple((int(i), float(x[i] - z)) for i in order)
    return TokenLogprobs(int(token), float(x[token] - z), top)


def token_logprobs_reference(row: np.ndarray, token: int, k: int) -> TokenLogprobs:
    """The naive reference: the whole float64 log-softmax, a full stable sort."""
    x = row.astype(np.float64)
    logp = x - np.log(np.sum(np.exp(x - x.max()))) - x.max()
    order = np.argsort(-logp, kind="stable")[: max(k, 0)]
    return TokenLogprobs(int(token), float(logp[token]), tuple((int(i), float(logp[i])) for i in order))
