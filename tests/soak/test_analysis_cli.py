"""The soak's verdict logic on synthetic samples, and its usage errors (no server needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from openhood.soak.analysis import analyze
from openhood.soak.traffic import MIX, TrafficMix


def samples(rss_of_t, n: int = 21, site_bytes: int = 0) -> list[dict]:
    out = []
    for i in range(n):
        sites = [{"site": "/x/leak.py:7", "size_delta": site_bytes, "count_delta": 1}] if i and site_bytes else []
        out.append(
            {
                "t": float(i),
                "requests": 10 * i,
                "memory": {
                    "process": {"rss_bytes": rss_of_t(i), "uss_bytes": rss_of_t(i) - 10, "fds": 12, "threads": 5},
                    "tracemalloc": {"traced_bytes": 1000 + site_bytes * i, "sites": sites},
                    "gc": {
                        "growing_types": [{"type": "Leaky", "count_delta": 3}] if site_bytes else [],
                        "shrinking_types": [],
                    },
                },
            }
        )
    return out


def test_steady_growth_fails_and_names_the_site():
    a = analyze(samples(lambda t: 100_000_000 + 1_000_000 * t, site_bytes=1_000_000), max_growth_pct=2.0)
    assert a["verdict"] == "fail"
    assert abs(a["growth"]["rss"]["growth_pct"] - 10 / 110 * 100) < 1e-6  # fitted 110 → 120 MB
    assert a["top_sites"][0]["site"] == "/x/leak.py:7" and a["top_types"][0]["type"] == "Leaky"


def test_only_the_baseline_sample_fails_without_crashing():
    a = analyze(samples(lambda t: 100e6, n=1))
    assert a["verdict"] == "fail" and a["growth"]["rss"] is None and a["top_sites"] == []


def test_warmup_growth_and_noise_pass():
    # fast growth during the first 30% (allocator pools filling), then flat with ±0.5% noise
    a = analyze(
        samples(lambda t: int(100e6 * (0.8 + 0.02 * t if t < 6 else 1.0 + 0.005 * (-1) ** t))), max_growth_pct=2.0
    )
    assert a["verdict"] == "pass", a["growth"]["rss"]
    assert a["top_sites"] == [] and a["top_types"] == []


def test_mix_is_seeded_and_covers_every_kind():
    models = [{"id": "a", "task": "embed", "max_length": 64}, {"id": "b", "task": "image-classify"}]
    first = [TrafficMix(models, seed=3).next() for _ in range(1)]
    mix = TrafficMix(models, seed=3)
    reqs = [mix.next() for _ in range(400)]
    assert reqs[0] == first[0]
    assert {r.kind for r in reqs} == set(MIX)
    assert {r.path for r in reqs} == {"/v1/embeddings", "/v1/images/classify"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "openhood.cli", "soak", *args], capture_output=True, text=True, timeout=60
    )


def test_remote_target_refused_with_one_line():
    p = run_cli("--url", "http://10.1.2.3:8000", "--seconds", "1")
    assert p.returncode == 2 and "loopback" in p.stderr and "Traceback" not in p.stderr


def test_usage_mistakes_exit_2():
    assert run_cli("--url", "http://127.0.0.1:9", "--seconds", "0").returncode == 2
    assert run_cli("--url", "http://127.0.0.1:9", "--warmup", "1.5").returncode == 2
    assert run_cli("--seconds", "5").returncode == 2  # neither --url nor --model


def test_report_renders_in_headless_chromium(tmp_path, missing_tool):
    from openhood.soak.report import write_report
    from openhood.soak.runner import SoakRun

    run = SoakRun(samples=samples(lambda t: 100_000_000 + 1_000_000 * t, site_bytes=1_000_000), models=[{"id": "a"}])
    page = write_report(tmp_path, analyze(run.samples), run, {"seconds": 20})
    assert json.loads((tmp_path / "soak.json").read_text())["analysis"]["verdict"] == "fail"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_tool("chromium is not installed (apt-get install -y chromium)", "OPENHOOD_REQUIRE_BROWSER")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for pid in ("rss", "traced", "fds", "sites", "types", "verdict"):
        assert f'id="{pid}"' in proc.stdout
    assert "/x/leak.py:7" in proc.stdout and "soak FAIL" in proc.stdout
