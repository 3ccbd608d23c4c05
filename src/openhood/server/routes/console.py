"""``GET /console``: the browser console (live view + playground), and ``GET /console/events``, its
one server-sent-events stream.

The page is three files shipped in the package (``server/console/``: HTML, JS, CSS, no CDN, no
fonts, charts drawn as SVG by the page's own script) served with a Content-Security-Policy that
lets the browser load nothing from another origin. The page itself is open like ``/docs``; the
stream and every API call it makes carry the key the user typed (kept in the page's memory only),
so with ``--api-key`` set the stream answers 401 without it and the page shows a login field.
The stream is ``data: {snapshot}`` once a tick from the shared ``ConsoleSampler`` (newest
snapshot only: a slow browser skips ticks, it never queues them), and it ends when the browser
goes away or the server starts draining. The trade-off: the stream is read with ``fetch`` (so it
can send the Authorization header), not ``EventSource``, which cannot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources

from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from openhood.server.auth import authorized
from openhood.server.console_snapshot import ConsoleSampler
from openhood.server.errors import draining, error_response, unauthorized
from openhood.server.state import ServerState

# Only this origin: the page's own script and style, same-origin fetches, dropped images as blob: URLs.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
ASSETS = {
    "/console": ("console.html", "text/html; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}


def asset_bytes(filename: str) -> bytes:
    return (resources.files("openhood.server") / "console" / filename).read_bytes()


def register(app: FastAPI, state: ServerState) -> None:
    sampler = ConsoleSampler(state)
    for path, (filename, media_type) in ASSETS.items():
        _serve_asset(app, path, asset_bytes(filename), media_type)

    @app.get("/console/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        if not authorized({k.lower(): v for k, v in request.headers.items()}, state.config.api_key):
            return error_response(unauthorized())
        if state.lifecycle.draining:
            return error_response(draining())

        async def stream() -> AsyncIterator[bytes]:
            async for snapshot in sampler.updates():
                yield b"data: " + snapshot + b"\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},  # no proxy buffering either
        )


def _serve_asset(app: FastAPI, path: str, body: bytes, media_type: str) -> None:
    @app.get(path, include_in_schema=False)
    async def asset() -> Response:
        return Response(
            body, media_type=media_type, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"}
        )
