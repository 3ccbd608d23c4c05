"""TEST HOOK ONLY — a memory leak planted on purpose, the negative control of ``openhood soak``.

With ``OPENHOOD_PLANT_LEAK=1`` in the server's environment (read once at start-up by
``openhood serve``, which logs a warning and calls ``install``), every embedding model's
postprocessor is wrapped so that each batch passes a fresh object to a function wrapped in
``functools.lru_cache(maxsize=None)``. A fresh object hashes by identity, so every call is a
cache miss and the cache keeps each argument and each returned array forever: the classic trap
this module reproduces exactly so a test can check that the soak catches it and names
``LEAK_LINE``. Never set it in production. The trade-off: the hook wraps the served model (one
line at start-up) rather than branching inside a route, so the request path stays the real one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

from openhood.models import Served, ServedModel, Task
from openhood.models.served import Postprocessor

ENV_VAR = "OPENHOOD_PLANT_LEAK"
LEAK_FLOATS = 1024 * 1024  # 4 MB per request: unmistakable within a 20-second soak at a few requests/s


def enabled() -> bool:
    return os.environ.get(ENV_VAR) == "1"


class _RequestKey:
    """A fresh object per request; hashed by identity like any plain object."""

    def __init__(self, n_inputs: int):
        self.n_inputs = n_inputs


@functools.lru_cache(maxsize=None)  # noqa: UP033 -- the trap exactly as it is usually written
def _scratch_for(key: _RequestKey) -> np.ndarray:
    # np.empty is C code, so this line is the innermost Python frame tracemalloc records (np.full
    # would be attributed to numpy's own numeric.py); fill() touches every page, so RSS grows too.
    scratch = np.empty(LEAK_FLOATS, dtype=np.float32)  # LEAK_LINE: the site the soak must name
    scratch.fill(key.n_inputs)
    return scratch


def leak(n_inputs: int) -> None:
    """Feed the cache one fresh key (and so one new 4 MB array it never lets go)."""
    _scratch_for(_RequestKey(n_inputs))


def leaking(post: Postprocessor) -> Postprocessor:
    """``post``, leaking once per batch it postprocesses."""

    def wrapped(outputs: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> np.ndarray:
        rows = post(outputs, feeds)
        leak(len(rows))
        return rows

    return wrapped


def install(models: Sequence[Served]) -> None:
    """Wrap every embedding model's postprocessor (the other tasks are left as they are)."""
    for model in models:
        if isinstance(model, ServedModel) and model.task == Task.EMBED:
            model.postprocessor = leaking(model.postprocessor)
