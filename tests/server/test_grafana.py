"""deploy/grafana/openhood.json against a real Prometheus (Debian's ``prometheus``).

Prometheus runs on 127.0.0.1 and scrapes the session's real server every second (with the
``namespace``/``pod`` labels Kubernetes service discovery would add); the test sends a mix of
successful and failing requests, then evaluates every query of the dashboard — and its variable
query, and the autoscaling rule of deploy/k8s/prometheus-adapter-values.yaml the way the
adapter renders it — through Prometheus' HTTP API: each must return data, none may error.
A missing ``prometheus`` binary skips the test; CI (``.ci/run``) sets
``OPENHOOD_REQUIRE_PROMETHEUS=1``, which makes that a failure.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from .conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "openhood.json"
ADAPTER = ROOT / "deploy" / "k8s" / "prometheus-adapter-values.yaml"
SCRAPE_S = 1
POD_LABELS = {"namespace": "test", "pod": "openhood-0"}
# Grafana's variables, as Grafana would fill them in with "All" models selected.
GRAFANA_VARS = {"$__rate_interval": "30s", "$model": ".*"}


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def grafana_expand(expr: str) -> str:
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr  # a variable this test does not know
    return expr


def adapter_rule() -> dict:
    return yaml.safe_load(ADAPTER.read_text(encoding="utf-8"))["rules"]["custom"][0]


def render_adapter(query: str, series: str, matchers: str, group_by: str) -> str:
    """prometheus-adapter's Go template for a metricsQuery, filled in as the adapter does."""
    return (
        query.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", group_by)
    )


def test_dashboard_is_well_formed():
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 12
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"] and p["description"], p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"])
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
    # Every TEI-style signal of docs/server.md § Metrics has a panel.
    exprs = " ".join(e for _, e in dashboard_queries())
    for metric in (
        "openhood_requests_total",
        "openhood_request_failures_total",
        "openhood_request_stage_seconds",
        "openhood_queue_depth",
        "openhood_batch_size",
        "openhood_batch_tokens",
    ):
        assert metric in exprs, metric
    assert "sum by (model, stage) (rate(openhood_request_stage_seconds_sum" in exprs  # the duration split


def test_autoscaling_panel_is_the_adapter_rule():
    rule = adapter_rule()
    series_matchers = re.search(r"\{(.*)\}", rule["seriesQuery"]).group(1)
    want = render_adapter(rule["metricsQuery"], rule["name"]["as"], series_matchers, "pod")
    assert want in [e for _, e in dashboard_queries()]


@pytest.fixture(scope="module")
def prometheus(request, tmp_path_factory, missing_tool):
    binary = shutil.which("prometheus")
    if binary is None:
        missing_tool("prometheus is not installed (apt-get install -y prometheus)", "OPENHOOD_REQUIRE_PROMETHEUS")
    server = request.getfixturevalue("server")  # only once there is a Prometheus to scrape it
    work = tmp_path_factory.mktemp("prometheus")
    target = server.url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "scrape_configs": [{"job_name": "openhood", "static_configs": [{"targets": [target], "labels": POD_LABELS}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(work / "prometheus.log", "wb")  # noqa: SIM115 -- closed below, after the process
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        timeout=httpx.Timeout(30.0, connect=2.0),
        limits=httpx.Limits(max_connections=4),
    )
    try:
        wait_for(lambda: proc.poll() is None and api.get("/-/ready").status_code == 200, "prometheus ready", proc, work)
        wait_for(lambda: scraped_up(api), "first scrape of the server", proc, work)
        yield api
    finally:
        api.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def wait_for(check, what: str, proc, work: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}: {(work / 'prometheus.log').read_text()[-3000:]}")
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"no {what} within {timeout_s:.0f} s: {(work / 'prometheus.log').read_text()[-3000:]}")


def scraped_up(api: httpx.Client) -> bool:
    result = api.get("/api/v1/query", params={"query": 'up{job="openhood"}'}).json()["data"]["result"]
    return bool(result) and result[0]["value"][1] == "1"


@pytest.fixture(scope="module")
def traffic(prometheus, client):
    """About six seconds of mixed traffic (six scrapes), successes and failures on several routes."""
    t0 = time.time()
    for k in range(20):
        assert (
            client.post(
                "/v1/embeddings", json={"input": [f"dashboard text {k}", "a second, longer one " * (k + 1)]}
            ).status_code
            == 200
        )
        assert client.post("/embed", json={"inputs": f"tei text {k}"}).status_code == 200
        assert client.post("/tokenize", json={"inputs": "tokens"}).status_code == 200
        assert client.post("/v1/embeddings", json={"input": "x", "model": "no-such-model"}).status_code == 404
        assert client.post("/embed", json={"inputs": 7}).status_code == 422
        time.sleep(0.3)
    time.sleep(3 * SCRAPE_S)  # the last requests scraped
    return t0, time.time()


def query_range(api: httpx.Client, expr: str, window: tuple[float, float]) -> list[dict]:
    resp = api.get(
        "/api/v1/query_range", params={"query": expr, "start": window[0], "end": window[1], "step": SCRAPE_S}
    )
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", (expr, body)
    assert not body.get("warnings"), (expr, body["warnings"])
    return body["data"]["result"]


def has_numbers(result: list[dict]) -> bool:
    return any(math.isfinite(float(v)) for series in result for _, v in series["values"])


def test_every_dashboard_query_returns_data(prometheus, traffic):
    empty = []
    for title, expr in dashboard_queries():
        result = query_range(prometheus, grafana_expand(expr), traffic)
        if not has_numbers(result):
            empty.append(title)
    assert not empty, f"panels without data: {empty}"


def test_model_variable_lists_the_served_model(prometheus, traffic, server):
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variable = next(v for v in dash["templating"]["list"] if v["name"] == "model")
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"]).groups()
    resp = prometheus.get(f"/api/v1/label/{label}/values", params={"match[]": metric})
    assert resp.json()["status"] == "success"
    assert "sentence-transformers/all-MiniLM-L6-v2" in resp.json()["data"]


def test_autoscaling_query_as_the_adapter_runs_it(prometheus, traffic):
    rule = adapter_rule()
    series = prometheus.get("/api/v1/series", params={"match[]": rule["seriesQuery"], "start": traffic[0]}).json()
    assert series["status"] == "success" and series["data"], series
    matchers = ",".join(f'{k}="{v}"' for k, v in POD_LABELS.items())
    expr = render_adapter(rule["metricsQuery"], rule["name"]["as"], matchers, "pod")
    result = query_range(prometheus, expr, traffic)
    assert [s["metric"] for s in result] == [{"pod": POD_LABELS["pod"]}]
    assert has_numbers(result)
