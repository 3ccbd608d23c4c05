"""openhood: an observable, replaceable, load-testable inference stack built from scratch."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Embedder", "Generator", "Tokenizer", "__version__"]


def __getattr__(name: str):
    # Lazy: `import openhood` stays cheap; the engine and tokenizer load only when asked for.
    if name == "Embedder":
        from openhood.embedder import Embedder

        return Embedder
    if name == "Generator":
        from openhood.generate import Generator

        return Generator
    if name == "Tokenizer":
        from openhood.tokenizer import Tokenizer

        return Tokenizer
    raise AttributeError(f"module 'openhood' has no attribute {name!r}")
