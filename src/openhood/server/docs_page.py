"""``GET /docs``: the API reference as one self-contained HTML page, rendered from ``/openapi.json``.

FastAPI's own page is Swagger UI loaded from a CDN (jsDelivr): on an air-gapped host, or behind a
proxy that blocks it, it is blank. This page is rendered on the server from the same OpenAPI
document — every route, its request schema and its responses — with inline CSS and a few lines
of inline script for "try it" (same-origin ``fetch`` only), and is served with a
Content-Security-Policy that lets the browser load nothing from anywhere else. The trade-off:
no schema browser widgets, only the schemas as JSON and an editable example body.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

# The browser may load nothing from another origin; inline style and script are the page's own.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
METHODS = ("get", "post", "put", "patch", "delete")

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 960px; padding: 0 1em 3em; color: #1b1b1b; }
h1 { margin-bottom: 0; } .version { color: #666; }
.op { border: 1px solid #d0d7de; border-radius: 6px; margin: 1em 0; padding: .2em 1em .8em; }
.method { display: inline-block; min-width: 4em; font-weight: bold; color: #fff; border-radius: 4px; text-align: center; }
.get { background: #1f6feb; } .post { background: #2da44e; } .other { background: #8250df; }
code, pre, textarea { font: 13px/1.4 ui-monospace, monospace; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; max-height: 24em; }
textarea { width: 100%; min-height: 5em; box-sizing: border-box; }
table { border-collapse: collapse; } td, th { border: 1px solid #d0d7de; padding: .2em .6em; text-align: left; }
#auth { width: 24em; }
"""

# Same-origin requests only (the CSP's connect-src enforces it); the key stays in the page.
SCRIPT = """
document.querySelectorAll("form.try").forEach(function (form) {
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var out = form.querySelector("pre.result");
    var headers = {"Content-Type": "application/json"};
    var key = document.getElementById("auth").value.trim();
    if (key) { headers["Authorization"] = "Bearer " + key; }
    var init = {method: form.dataset.method, headers: headers};
    var body = form.querySelector("textarea");
    if (body) { init.body = body.value; }
    out.textContent = "…";
    fetch(form.dataset.path, init).then(function (resp) {
      return resp.text().then(function (text) { out.textContent = resp.status + "\\n" + text.slice(0, 20000); });
    }, function (err) { out.textContent = String(err); });
  });
});
document.body.dataset.ready = document.querySelectorAll("form.try").length;
"""


def example(schema: dict[str, Any], components: dict[str, Any]) -> Any:
    """A small valid-looking value for a JSON schema: the required fields filled in."""
    if "$ref" in schema:
        return example(components.get(schema["$ref"].rsplit("/", 1)[-1], {}), components)
    if "example" in schema:
        return schema["example"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            return example(options[0], components) if options else None
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {name: example(props[name], components) for name in schema.get("required", []) if name in props}
    if kind == "array":
        return [example(schema.get("items", {}), components)]
    return {"string": "hello world", "integer": 1, "number": 1.0, "boolean": True}.get(kind or "")


def render(openapi: dict[str, Any]) -> str:
    """The whole page for an OpenAPI document (FastAPI's ``app.openapi()``)."""
    components = openapi.get("components", {}).get("schemas", {})
    info = openapi.get("info", {})
    ops = []
    for path, item in openapi.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                ops.append(operation(path, method, item[method], components))
    title = escape(str(info.get("title", "API")))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} API</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{title} <span class="version">{escape(str(info.get("version", "")))}</span></h1>
<p>{len(ops)} operations. The machine-readable document: <a href="/openapi.json"><code>/openapi.json</code></a>.
This page loads nothing from other hosts. Routes and errors are explained in docs/server.md.</p>
<p><label>API key (sent as <code>Authorization: Bearer …</code>; stays in this page):
<input id="auth" type="password" autocomplete="off"></label></p>
{"".join(ops)}
<script>{SCRIPT}</script>
</body>
</html>
"""


def operation(path: str, method: str, op: dict[str, Any], components: dict[str, Any]) -> str:
    css = method if method in ("get", "post") else "other"
    parts = [
        f'<div class="op" id="{escape(method + path)}"><h2><span class="method {css}">{method.upper()}</span> '
        f"<code>{escape(path)}</code></h2>"
    ]
    if op.get("summary"):
        parts.append(f"<p><b>{escape(op['summary'])}</b></p>")
    if op.get("description"):
        parts.append(f"<p>{escape(op['description'])}</p>")
    schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if schema is not None:
        parts.append(
            f"<details><summary>Request body schema</summary><pre>{escape(json.dumps(schema, indent=2))}</pre></details>"
        )
    responses = op.get("responses", {})
    if responses:
        rows = "".join(
            f"<tr><td>{escape(str(status))}</td><td>{escape(str(r.get('description', '')))}</td></tr>"
            for status, r in responses.items()
        )
        parts.append(f"<table><tr><th>status</th><th>meaning</th></tr>{rows}</table>")
    body = ""
    if method != "get":
        sample = json.dumps(example(schema, components) if schema is not None else {}, indent=2)
        body = f'<textarea name="body" spellcheck="false">{escape(sample)}</textarea>'
    parts.append(
        f'<form class="try" data-method="{method.upper()}" data-path="{escape(path)}">{body}'
        '<button type="submit">Send</button><pre class="result"></pre></form></div>\n'
    )
    return "".join(parts)
