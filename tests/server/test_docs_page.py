"""``GET /docs`` works offline: one self-contained page (server/docs_page.py) that references no
other host, served with a CSP that forbids loading from one, and renders in headless Chromium
with every host name unresolvable."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.testclient import TestClient

from openhood.server.app import create_app
from openhood.server.config import ServerConfig

URL_ATTRS = {"src", "href", "action", "formaction", "data", "poster", "srcset", "background", "manifest"}
EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)  # http://, https://, //host
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)|@import\s+['\"]([^'\"]+)", re.IGNORECASE)
JS_URL = re.compile(r"['\"]((?:https?:)?//[^'\"]+)['\"]", re.IGNORECASE)


class References(HTMLParser):
    """Every URL a page would make the browser fetch or navigate to: attributes, CSS, script strings."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        for name, val in attrs:
            if val and (name in URL_ATTRS or (name == "content" and "url=" in val.lower())):
                self.urls.append(val)
            if val and name == "style":
                self.urls += [a or b for a, b in CSS_URL.findall(val)]
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "style":
            self.urls += [a or b for a, b in CSS_URL.findall(data)]
        elif self._in == "script":
            self.urls += JS_URL.findall(data)


def external_references(html: str) -> list[str]:
    parser = References()
    parser.feed(html)
    return [u for u in parser.urls if EXTERNAL.match(u)]


@pytest.fixture(scope="module")
def page(embedder):
    app = create_app(ServerConfig(), [embedder.model])
    with TestClient(app) as c:
        resp = c.get("/docs")
        openapi = c.get("/openapi.json").json()
    return resp, openapi


def test_checker_catches_fastapis_cdn_page():
    swagger = get_swagger_ui_html(openapi_url="/openapi.json", title="x").body.decode()
    assert any("cdn.jsdelivr.net" in u for u in external_references(swagger))


def test_docs_page_references_no_other_host(page):
    resp, _ = page
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert external_references(resp.text) == []
    assert "cdn" not in resp.text.lower()
    csp = resp.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "http" not in csp


def test_docs_page_lists_every_operation(page):
    resp, openapi = page
    for path, item in openapi["paths"].items():
        for method in item:
            assert f'id="{method}{path}"' in resp.text, (method, path)
    # the example body is valid for the route: its required field filled in
    assert "&quot;input&quot;: &quot;hello world&quot;" in resp.text


def test_docs_page_runs_in_chromium_without_network(server, missing_tool):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_tool("chromium is not installed (apt-get install -y chromium)", "OPENHOOD_REQUIRE_BROWSER")
    # Every host name fails to resolve except the loopback address the test server listens on.
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--virtual-time-budget=5000",
            "--dump-dom",
            server.url + "/docs",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The inline script ran (it counts the try-it forms) and the server-rendered operations are there.
    ready = re.search(r'<body[^>]*data-ready="(\d+)"', proc.stdout)
    assert ready and int(ready.group(1)) >= 8, proc.stdout[:2000]
    assert 'id="post/v1/embeddings"' in proc.stdout
