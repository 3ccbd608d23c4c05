"""The ASGI middleware every request passes: request id, drain and auth gates, in-flight count,
status metrics and the one JSON log line per ``/v1`` request.

Plain ASGI (not ``BaseHTTPMiddleware``) so it neither buffers responses nor hides client
disconnects. Handlers add their own fields (model, lengths, stage times — never text) to the
request's ``RequestRecord``, which becomes the log line.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from openhood.server.auth import authorized
from openhood.server.errors import draining, error_response, unauthorized
from openhood.server.logs import log_access, request_id_var

if TYPE_CHECKING:
    from openhood.server.state import ServerState

REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")  # echoed in headers and logs: keep it inert


@dataclass
class RequestRecord:
    """What the log line, metrics and spans of one request are made of. Lengths, never text."""

    request_id: str
    route: str
    method: str
    start_ns: int = field(default_factory=time.monotonic_ns)
    status: int = 0
    fields: dict[str, Any] = field(default_factory=dict)


class ObservabilityMiddleware:
    """Request id, drain/auth gates for /v1, in-flight count, status metrics, the JSON log line."""

    def __init__(self, app: ASGIApp, *, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = self.state
        path = scope["path"]
        route = path if path in st.route_labels else "other"  # bounded label set
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        supplied = headers.get("x-request-id", "")
        request_id = supplied if REQUEST_ID.match(supplied) else uuid.uuid4().hex
        record = RequestRecord(request_id, route, scope["method"])
        scope.setdefault("state", {})["record"] = record
        request_id_var.set(request_id)  # this task's log lines (asyncio copies the context per task)
        is_api = path.startswith("/v1/") or path in st.api_paths  # e.g. the TEI routes

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                has_close = any(k.lower() == b"connection" for k, _ in message.get("headers", []))
                if st.lifecycle.draining and not has_close:  # one Connection header, never two
                    extra.append((b"connection", b"close"))  # let keep-alive clients move elsewhere
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        gate = None
        if is_api and st.lifecycle.draining:
            gate = draining()
            st.metrics.rejected.labels("", "draining").inc()
        elif (is_api or path.startswith("/debug/")) and not authorized(headers, st.config.api_key):
            gate = unauthorized()
        if gate is not None:
            record.fields["error"] = gate.code
        try:
            if gate is not None:
                await error_response(gate)(scope, receive, send_wrapper)
                return
            if is_api:
                st.lifecycle.in_flight += 1
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                if is_api:
                    st.lifecycle.in_flight -= 1
        finally:
            if record.status == 0:
                record.status = 500  # an exception escaped before a response started
            st.metrics.http_requests.labels(route, str(record.status)).inc()
            if is_api:  # health probes and scrapes would drown the request lines
                error = "client_gone" if record.fields.get("disconnected") else record.fields.get("error")
                st.metrics.observe_api_request(record.fields.get("model", ""), route, record.status, error)
                log_access(
                    {
                        "request_id": request_id,
                        "method": record.method,
                        "route": route,
                        "status": record.status,
                        "total_ms": round((time.monotonic_ns() - record.start_ns) / 1e6, 3),
                        **record.fields,
                    }
                )
