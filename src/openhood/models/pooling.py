"""``MeanPooling``: token states → one sentence vector per row, L2-normalized when the model is.

The embed task's postprocessor: the backend returns the encoder's last states (``(B, T, C)``,
or ``(B*T, C)`` from the NumPy engine, whose hidden states are 2-D; the mask's shape says which
is which) and this averages them over real tokens, then normalizes only if the model has a
Normalize module (sentence-transformers' ``modules.json``). The math is the engine's
(``engine.kernels.ops.mean_pool`` / ``l2_normalize``, tested against their naive references), so the
pooled graph the exporter and quantizer use and this postprocessor cannot disagree. The
trade-off: pooling runs as a separate NumPy step after the backend (≈1% of a forward pass).
"""

from __future__ import annotations

import numpy as np

from openhood.engine.kernels import ops


class MeanPooling:
    def __init__(self, normalize: bool, states: str = "token_embeddings"):
        self.normalize = normalize
        self.states = states  # the backend output holding the token states

    def __call__(self, outputs: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> np.ndarray:
        mask = feeds["attention_mask"]  # (B, T)
        hidden = np.asarray(outputs[self.states], dtype=np.float32).reshape(*mask.shape, -1)  # (B, T, C)
        pooled = ops.mean_pool(hidden, mask)  # (B, C)
        return ops.l2_normalize(pooled) if self.normalize else pooled

    def __repr__(self) -> str:
        return f"MeanPooling(normalize={self.normalize})"
