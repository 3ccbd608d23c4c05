"""Input validation and the health probe shared by every backend.

Both backends must reject the same bad inputs with the same messages and probe health the
same way, so the server's behaviour does not depend on which engine runs. The health probe
is a real inference on a tiny all-[PAD]-id input (any ids are valid input): it checks shape,
finiteness and unit norm, and times itself.
"""

from __future__ import annotations

import time

import numpy as np


def check_inputs(input_ids: np.ndarray, attention_mask: np.ndarray, max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """The (B, T) integer id and mask arrays a backend may run, or a clear error.

    >>> check_inputs(np.ones((1, 600), np.int64), np.ones((1, 600), np.int64), 512)
    Traceback (most recent call last):
    ...
    ValueError: sequence length 600 exceeds the model's 512 positions
    """
    ids = np.asarray(input_ids)
    mask = np.asarray(attention_mask)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be 2-D (batch, seq), got shape {ids.shape}")
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask shape {mask.shape} differs from input_ids shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer) or not np.issubdtype(mask.dtype, np.integer):
        raise TypeError(f"input_ids and attention_mask must be integer arrays, got {ids.dtype} and {mask.dtype}")
    if ids.shape[1] > max_positions:
        raise ValueError(f"sequence length {ids.shape[1]} exceeds the model's {max_positions} positions")
    return ids, mask


def probe(backend) -> dict:
    """Run one tiny real inference; raise RuntimeError unless the output is sane."""
    ids = np.zeros((1, 8), dtype=np.int64)
    mask = np.ones((1, 8), dtype=np.int64)
    t0 = time.perf_counter()
    out = backend.embed(ids, mask)
    ms = (time.perf_counter() - t0) * 1e3
    if out.shape != (1, backend.dim) or out.dtype != np.float32:
        raise RuntimeError(f"{backend.name} health probe: bad output {out.shape} {out.dtype}, expected (1, {backend.dim}) float32")
    if not np.all(np.isfinite(out)):
        raise RuntimeError(f"{backend.name} health probe: non-finite output")
    norm = float(np.linalg.norm(out))
    if getattr(backend, "normalized", True) and abs(norm - 1.0) > 1e-3:
        raise RuntimeError(f"{backend.name} health probe: output norm {norm:.4f}, expected 1")
    return {"ok": True, "backend": backend.name, "precision": backend.precision, "dim": backend.dim, "latency_ms": round(ms, 3)}
