"""Fixtures: a stub server per test (child process on a free loopback port) and a small corpus."""

from __future__ import annotations

import json

import pytest

from .stub_server import StubServer, StubState


@pytest.fixture
def stub():
    """``stub(**state)`` starts a stub server with those settings; all are stopped at teardown."""
    servers = []

    def start(**kwargs) -> StubServer:
        server = StubServer(StubState(**kwargs)).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture
def corpus_file(tmp_path):
    """A JSONL corpus of generated text: many short lines and a tail of long ones."""
    path = tmp_path / "corpus.jsonl"
    lines = []
    for i in range(300):
        words = 3 + (i % 7) if i % 10 else 40 + i % 80  # 90% short, 10% long
        lines.append(json.dumps({"text": " ".join(f"w{i}x{j}" for j in range(words))}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
