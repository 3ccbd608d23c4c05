"""``/debug/memory``: off by default, behind the API key, and a real diff of what grew."""

from __future__ import annotations

from pathlib import Path

import pytest

from openhood.server.memory_probe import MemoryProbe
from tests.server.conftest import API_KEY, ServerProcess


def test_probe_names_the_growing_line_and_type():
    probe = MemoryProbe()
    probe.start()
    first = probe.sample(top=10)
    assert first["tracemalloc"]["first_call"] and first["tracemalloc"]["sites"] == []

    class Hoarded:
        pass

    kept = [(Hoarded(), bytearray(50_000)) for _ in range(40)]  # the line that grows by ~2 MB
    second = probe.sample(top=10)
    top = second["tracemalloc"]["sites"][0]
    assert top["site"].endswith(f"test_debug_memory.py:{kept_line()}") and top["size_delta"] > 40 * 50_000
    growing = {r["type"]: r["count_delta"] for r in second["gc"]["growing_types"]}
    assert growing[f"{__name__}.test_probe_names_the_growing_line_and_type.<locals>.Hoarded"] == 40
    assert second["process"]["rss_bytes"] > 0 and second["process"]["threads"] >= 1
    del kept


def kept_line() -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, s in enumerate(lines, 1) if "# the line that grows" in s)


def test_off_unless_enabled(client):
    assert client.get("/debug/memory").status_code == 404  # the shared server runs without --debug-endpoints


@pytest.fixture(scope="module")
def debug_server(tmp_path_factory):
    srv = ServerProcess(
        tmp_path_factory.mktemp("debug") / "server.log",
        "--debug-endpoints",
        "--api-key",
        API_KEY,
        "--workers",
        "1",
        "--threads",
        "1",
        "--buckets",
        "32",
    )
    yield srv
    assert srv.stop() == 0


def test_behind_the_key_and_diffs_against_the_previous_call(debug_server):
    with debug_server.client() as c:
        assert c.get("/debug/memory").status_code == 401
        auth = {"Authorization": f"Bearer {API_KEY}"}
        first = c.get("/debug/memory", headers=auth).json()
        for _ in range(3):
            assert c.post("/v1/embeddings", json={"input": ["a soak of memory"]}, headers=auth).status_code == 200
        body = c.get("/debug/memory", params={"top": 5}, headers=auth).json()
    assert first["tracemalloc"] is not None
    assert not body["tracemalloc"]["first_call"] and len(body["tracemalloc"]["sites"]) <= 5
    assert all(":" in s["site"] and "size_delta" in s and "count_delta" in s for s in body["tracemalloc"]["sites"])
    assert len(body["gc"]["top_types"]) == 5 and body["gc"]["objects"] > 1000
    assert set(body["process"]) == {"rss_bytes", "uss_bytes", "fds", "threads"}
