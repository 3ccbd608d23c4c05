"""The --report directory from a real (stub-server) run: valid HTML with its four plots."""

import csv
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from openhood.cli import main

PLOT_IDS = ["plot-latency-histogram", "plot-latency-over-time", "plot-latency-vs-length", "plot-throughput-over-time"]
VOID = {"meta", "br", "img", "hr", "input", "link"}


class Checker(HTMLParser):
    """Checks nesting (every opened tag closed in order) and collects SVGs and their shapes."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.svgs, self.decl = [], [], {}, None
        self.current = None

    def handle_decl(self, decl):
        self.decl = decl

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.current = a.get("id")
            self.svgs[self.current] = {"shapes": 0, "title": None}
        elif self.current and tag in ("rect", "circle", "polyline") and a.get("class") in ("bar", "pt", "series"):
            self.svgs[self.current]["shapes"] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        a = dict(attrs)
        if self.current and tag in ("rect", "circle", "polyline") and a.get("class") in ("bar", "pt", "series"):
            self.svgs[self.current]["shapes"] += 1

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
            return
        self.stack.pop()
        if tag == "svg":
            self.current = None


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    from .stub_server import StubServer, StubState

    out = tmp_path_factory.mktemp("report")
    with StubServer(StubState(service_s=0.003, per_token_s=0.0002)) as s:
        rc = main(
            [
                "loadtest",
                s.url,
                "--rate",
                "80",
                "--duration",
                "1.5",
                "--warmup",
                "0.3",
                "--quiet",
                "--report",
                str(out),
                "--min-bucket-samples",
                "5",
            ]
        )
    assert rc == 0
    return out


def test_report_is_well_formed_html_with_four_plots(report_dir):
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    c = Checker()
    c.feed(html)
    c.close()
    assert c.decl and c.decl.lower() == "doctype html"
    assert not c.errors and not c.stack, (c.errors, c.stack)
    for pid in PLOT_IDS:
        assert pid in c.svgs, pid
        assert c.svgs[pid]["shapes"] > 0, f"{pid} has no data drawn"
    assert "Per input-length bucket" in html and "SLO" in html


def test_report_raw_files(report_dir):
    summary = json.loads((report_dir / "summary.json").read_text())["run"]
    rows = list(csv.DictReader((report_dir / "requests.csv").open()))
    assert len(rows) == summary["requests"] > 50
    assert set(rows[0]) == {
        "scheduled_s",
        "sent_s",
        "done_s",
        "latency_ms",
        "status",
        "n_texts",
        "chars",
        "tokens_per_text",
    }
    assert "w" not in "".join(r["status"] for r in rows)  # no text in the CSV, only numbers


def test_report_renders_in_headless_chromium(report_dir, tmp_path, missing_tool):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_tool("chromium is not installed (apt-get install -y chromium)", "OPENHOOD_REQUIRE_BROWSER")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", (report_dir / "index.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for pid in PLOT_IDS:
        assert f'id="{pid}"' in proc.stdout
