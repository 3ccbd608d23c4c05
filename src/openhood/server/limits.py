"""Connection hygiene below the ASGI app: limits uvicorn's httptools protocol does not enforce.

uvicorn bounds the keep-alive idle time (``timeout_keep_alive``) but not the request head: llhttp
buffers a header of any size, any number of headers, a request line of any length, and a
connection that never sends a byte stays open forever. ``limited_protocol`` subclasses uvicorn's
``HttpToolsProtocol`` and adds, per connection:

- a cap on open connections: one over it gets a 503 and is closed at once (refuse fast: the
  client learns in one round trip, and file descriptors stay bounded);
- a head deadline: the request line and headers must arrive within ``header_timeout_s`` of the
  connection (or of the previous response); otherwise 408, or a silent close if nothing came;
- byte and count caps on the head: request line over ``max_request_line`` → 414; head bytes
  over ``max_header_bytes`` or more than ``max_headers`` headers → 431.

The body is timed by the app (``read_body`` in ``app.py``: 408 JSON at ``body_timeout_s``), where
the error has OpenAI's shape. The caps are checked twice: after each read while the head is
incomplete (raw bytes so far, so a head sent in pieces is cut off early), and on the whole
parsed head (``on_headers_complete``, before a request cycle exists), so a head that arrives in
one read is refused just the same. Trade-off: the buffered head may overshoot its cap by one
socket read (≤ 256 KiB) before it is refused.

During a drain, ``shutdown`` does not cut an idle keep-alive connection on the spot (a request
may already be on the wire: it would get no response at all); it waits ``SHUTDOWN_LINGER_S``
for bytes, answers what arrives (the app says 503 draining) and closes after that response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from openhood.server.config import ServerConfig

log = logging.getLogger("openhood.server")

SHUTDOWN_LINGER_S = 0.25

_REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def raw_error(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 error response in OpenAI's JSON shape, written before any ASGI cycle exists."""
    body = b'{"error":{"message":"%s","type":"invalid_request_error","param":null,"code":"%s"}}' % (
        message.encode("ascii"),
        _REASONS[status].lower().replace(b" ", b"_"),
    )
    return b"".join(
        (
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body,
        )
    )


def limited_protocol(limits: ServerConfig, on_refused: Callable[[str], None] | None = None) -> type:
    """An ``HttpToolsProtocol`` subclass enforcing ``limits`` (a ``ServerConfig``: its max_connections,
    max_header_bytes, max_headers, max_request_line, header_timeout_s); ``on_refused(reason)`` counts."""

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        _head_bytes = 0
        _reading_head = True
        _head_timer = None
        _linger = None
        _closing_after_response = False
        _refused = False  # a refusal was written: nothing more of this connection reaches the app

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(503, "too many open connections; retry later", "connections")
                return
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel(self._head_timer)
            self._cancel(self._linger)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._linger is not None:  # a request came in during the drain linger: answer it
                self._cancel(self._linger)
                self._linger = None
                self._closing_after_response = True
            if self._reading_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if not self._reading_head or self.transport.is_closing():
                return
            # A head still incomplete after this read: bound what it has cost so far.
            self._check_head(len(getattr(self, "url", b"") or b""), len(self.headers or ()), self._head_bytes)

        def on_headers_complete(self) -> None:
            self._reading_head = False
            self._head_bytes = 0
            self._cancel(self._head_timer)
            # A head that arrived in one read is only seen whole here: check it before a request
            # cycle (and the app) ever sees it.
            if self._head_over_limits():
                return
            super().on_headers_complete()
            if self._closing_after_response and self.cycle is not None:
                self.cycle.keep_alive = False

        def on_body(self, body: bytes) -> None:
            if not self._refused:  # the parser goes on through a refused request's bytes: drop them
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                super().on_message_complete()
            self._reading_head = True  # the next bytes are the next request's head

        def _head_over_limits(self) -> bool:
            """The whole parsed head against the limits; its bytes counted from what the parser
            kept (request line, names, values, separators), exact however the head arrived."""
            url, headers = self.url or b"", self.headers or []
            size = len(self.parser.get_method()) + len(url) + len(b"  HTTP/1.1\r\n\r\n")
            size += sum(len(name) + len(value) + len(b": \r\n") for name, value in headers)
            return self._refused or self._check_head(len(url), len(headers), size)

        def _check_head(self, url_bytes: int, headers: int, head_bytes: int) -> bool:
            """Refuse (414/431) a head over a limit; True when it was refused."""
            if url_bytes > limits.max_request_line:
                self._refuse(414, f"request line over {limits.max_request_line} bytes", "request_line")
            elif headers > limits.max_headers:
                self._refuse(431, f"more than {limits.max_headers} headers", "header_count")
            elif head_bytes > limits.max_header_bytes:
                self._refuse(431, f"request head over {limits.max_header_bytes} bytes", "header_bytes")
            return self._refused

        def shutdown(self) -> None:
            if (self.cycle is None or self.cycle.response_complete) and self._head_bytes == 0:
                # Idle: a request may be in flight on the wire; give it a moment to land.
                self._linger = self.loop.call_later(SHUTDOWN_LINGER_S, self._close_idle)
            elif self.cycle is None or self.cycle.response_complete:
                self._closing_after_response = True  # a head is half read: answer it, then close
            else:
                self.cycle.keep_alive = False

        def _close_idle(self) -> None:
            self._linger = None
            if not self.transport.is_closing():
                self.transport.close()

        def _arm_head_timer(self) -> None:
            self._cancel(self._head_timer)
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or not self._reading_head:
                return
            if self._head_bytes:
                self._refuse(408, f"request head not received within {limits.header_timeout_s:g} s", "header_timeout")
            else:  # an idle connection: nothing to answer
                self._count("idle_timeout")
                self.transport.close()

        def _refuse(self, status: int, message: str, reason: str) -> None:
            self._refused = True
            self._count(reason)
            log.warning(
                "refused",
                extra={
                    "fields": {"event": "connection_refused", "message": message, "status": status, "reason": reason}
                },
            )
            self.transport.write(raw_error(status, message))
            self.transport.close()

        @staticmethod
        def _count(reason: str) -> None:
            if on_refused is not None:
                on_refused(reason)

        @staticmethod
        def _cancel(handle: asyncio.TimerHandle | None) -> None:
            if handle is not None:
                handle.cancel()

    return LimitedHttpToolsProtocol
