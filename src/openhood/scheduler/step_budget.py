"""How many prompt tokens one generation step may carry beside its decode rows.

A step is one packed forward over ``d`` decode rows plus ``p`` prompt tokens, and every running
sequence waits for the whole step before its next token: a step that carries a prompt chunk is
an inter-token gap for all of them. Its time is close to linear in the tokens it carries,
``t(n) ≈ a + b·n`` (``a``: one pass over the weights plus per-step overhead; ``b``: the matmul
work per token). ``StepBudget`` fits ``a`` and ``b`` to the recent steps (least squares over a
sliding window, so it follows a machine that slows down under a noisy neighbour) and allows the
``p`` that keeps a step within ``stretch`` decode steps of the whole running batch (``r``
sequences: those decoding and those still reading their prompt):

    p = (stretch · t(r) − a) / b − d,   clamped to [MIN_PREFILL, chunk]

Measuring against ``t(r)`` rather than ``t(d)`` matters when many prompts arrive at once: with
2 sequences decoding and 14 reading prompts, a budget tied to the 2 would read the 14 prompts
a few tokens per step, starving the batch (and throughput) for dozens of steps; in the steady
state ``r ≈ d`` and the bound is the inter-token one. With nobody decoding, the whole chunk: no stream is waiting. Before any step is seen, the whole
chunk too; with fewer than ``MIN_POINTS`` steps, or while every recent step carried about the
same number of tokens (no spread to separate ``a`` from ``b``), it assumes ``a = 0``, which
allows the least (``p = stretch·r − d``).

The trade-off: a long prompt that arrives while many streams decode is spread over more steps,
so its time to first token grows, in exchange for an inter-token P99 held near ``stretch`` × the
P50. The linear model ignores attention's growth with context, small beside the matmuls for the
≤ 2k-token contexts served here.
"""

from __future__ import annotations

from collections import deque

import numpy as np

MIN_PREFILL = 8  # prompt tokens a step always carries: a prompt progresses however busy the batch
WINDOW = 128  # recent steps in the fit
MIN_POINTS = 8  # steps observed before the line's intercept is trusted


class StepBudget:
    def __init__(self, chunk: int, stretch: float, window: int = WINDOW):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if stretch != 0 and stretch < 1:
            raise ValueError(f"stretch must be 0 (off) or >= 1, got {stretch}")
        self.chunk, self.stretch = chunk, stretch
        self._tokens: deque[int] = deque(maxlen=window)
        self._seconds: deque[float] = deque(maxlen=window)

    def observe(self, tokens: int, seconds: float) -> None:
        """One finished step: the tokens its forward carried and how long the step took."""
        if tokens > 0 and seconds > 0:
            self._tokens.append(tokens)
            self._seconds.append(seconds)

    def fit(self) -> tuple[float, float] | None:
        """(a, b) of ``t(n) = a + b·n`` in seconds, or None before any step."""
        if not self._tokens:
            return None
        n = np.asarray(self._tokens, dtype=np.float64)
        t = np.asarray(self._seconds, dtype=np.float64)
        if len(n) >= MIN_POINTS and n.max() >= 2 * n.min():
            b, a = np.polyfit(n, t, 1)
            if b > 0:
                return max(float(a), 0.0), float(b)
        return 0.0, float(np.median(t / n))  # few steps, no spread or a noisy slope: all per token

    def prefill_tokens(self, decode_rows: int, running: int | None = None) -> int:
        """Prompt tokens the next step may carry beside ``decode_rows`` decode rows, with
        ``running`` sequences in the batch (default: ``decode_rows``)."""
        if decode_rows == 0 or self.stretch == 0:
            return self.chunk
        fitted = self.fit()
        if fitted is None:
            return self.chunk
        a, b = fitted
        r = max(decode_rows, running or 0)
        p = int((self.stretch * (a + b * r) - a) / b) - decode_rows
        return max(MIN_PREFILL, min(self.chunk, p))
