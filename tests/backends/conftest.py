"""Shared fixtures for backend tests: backends built once (the reference set is in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedders():
    """name → Embedder; built lazily so a failing backend fails only its own tests."""
    from openhood import Embedder

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = Embedder.from_pretrained(backend=name)
        return cache[name]

    return get
