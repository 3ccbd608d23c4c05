"""openhood: an observable, replaceable, load-testable inference stack built from scratch."""

from __future__ import annotations

import os
import sys

# numba caches openhood's compiled kernels (tokenizer and engine, ``cache=True``) on disk so only
# the first process on a machine pays their compilation (seconds); later ones load them in
# milliseconds. Per user, under the XDG cache directory, unless the user chose NUMBA_CACHE_DIR.
# numba reads the variable when it is imported, so this runs before any openhood module imports it.
NUMBA_CACHE_DIR = os.environ.setdefault(
    "NUMBA_CACHE_DIR",
    os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "openhood", "numba"),
)
if "numba" in sys.modules:  # imported before openhood: tell its config directly
    sys.modules["numba"].config.CACHE_DIR = NUMBA_CACHE_DIR

__all__ = ["Embedder", "Generator", "WordPieceTokenizer", "__version__"]


def __getattr__(name: str):
    # Lazy: `import openhood` stays cheap; the engine and tokenizer load only when asked for.
    if name == "__version__":
        # The one place the version lives is pyproject.toml; the installed metadata carries it.
        from importlib.metadata import version

        return version("openhood")
    if name == "Embedder":
        from openhood.embedder import Embedder

        return Embedder
    if name == "Generator":
        from openhood.generate import Generator

        return Generator
    if name == "WordPieceTokenizer":
        from openhood.tokenizer import WordPieceTokenizer

        return WordPieceTokenizer
    raise AttributeError(f"module 'openhood' has no attribute {name!r}")
