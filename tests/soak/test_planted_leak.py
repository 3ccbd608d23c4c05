"""The negative control: ``openhood soak`` must fail on a server with the planted leak and name
its line, and pass on the same server without it (real server processes, real HTTP).

Both soaks are short (20 s of traffic after start-up); the planted leak keeps 4 MB per
embeddings request, so at even a few requests/s the RSS rise from mid-run to end is several
times the limit, while the clean server stays under it. The limit is issue #18's 2% for the
reduced soak that ``make test`` runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openhood.models.registry import default_model_dir
from openhood.server import planted_leak

MAX_GROWTH_PCT = 2.0
SOAK = [
    "--seconds",
    "20",
    "--sample-every",
    "1",
    "--max-growth",
    str(MAX_GROWTH_PCT),
    "--concurrency",
    "3",
    "--serve-args",
    "--workers 1 --threads 1 --buckets 32,64",
]


def leak_site() -> str:
    path = Path(planted_leak.__file__)
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "# LEAK_LINE" in s)
    return f"{path.name}:{line}"


def soak(out: Path, plant: bool) -> tuple[int, dict, str]:
    env = {k: v for k, v in os.environ.items() if k != planted_leak.ENV_VAR}
    if plant:
        env[planted_leak.ENV_VAR] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "openhood.cli", "soak", "--model", str(default_model_dir()), "--out", str(out), *SOAK],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    doc = json.loads((out / "soak.json").read_text()) if (out / "soak.json").is_file() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


@pytest.mark.timeout(450)
def test_planted_leak_fails_and_is_named(tmp_path):
    rc, doc, output = soak(tmp_path, plant=True)
    assert rc == 1, output
    analysis = doc["analysis"]
    assert analysis["verdict"] == "fail"
    assert analysis["growth"]["rss"]["growth_pct"] > MAX_GROWTH_PCT, analysis["growth"]
    sites = [s["site"] for s in analysis["top_sites"][:5]]
    assert any(s.endswith(leak_site()) for s in sites), (leak_site(), sites)
    assert "openhood.server.planted_leak._RequestKey" in [t["type"] for t in analysis["top_types"]], analysis[
        "top_types"
    ]
    html = (tmp_path / "index.html").read_text()
    assert "soak FAIL" in html and "<svg" in html and leak_site() in html
    assert "planted memory leak active" in (tmp_path / "server.log").read_text()


@pytest.mark.timeout(450)
def test_same_soak_without_the_leak_passes(tmp_path):
    rc, doc, output = soak(tmp_path, plant=False)
    assert rc == 0, output
    analysis = doc["analysis"]
    assert analysis["verdict"] == "pass"
    assert analysis["growth"]["rss"]["growth_pct"] < MAX_GROWTH_PCT, analysis["growth"]
    assert not any(s["site"].endswith(leak_site()) for s in analysis["top_sites"])
    assert doc["unexpected"] == 0, doc["outcomes"]
    # the mix really took the error paths and disconnects, not only valid requests
    kinds = {k.split()[0] for k in doc["outcomes"]}
    assert {"valid", "malformed", "oversized", "unknown_model"} <= kinds, doc["outcomes"]
