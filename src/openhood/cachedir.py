"""Where openhood keeps what it caches between processes: one per-user directory.

``$OPENHOOD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/openhood``, else ``~/.cache/openhood``;
numba's compiled kernels go to its ``numba/`` (openhood/__init__.py), start-up records to its
``records/`` (openhood/diskcache.py). Standard library ``os`` only: ``import openhood`` reads it.
"""

from __future__ import annotations

import os

ENV_VAR = "OPENHOOD_CACHE_DIR"


def cache_root() -> str:
    """The cache directory (not created here)."""
    if os.environ.get(ENV_VAR):
        return os.environ[ENV_VAR]
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "openhood")
