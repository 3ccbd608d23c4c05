"""Server-sent events, client side: bytes in, the ``data`` payload of each complete event out.

An OpenAI streaming response is ``text/event-stream``: events separated by a blank line, each
with one or more ``data:`` lines (joined with ``\\n``), ``:comment`` lines to ignore, and a
final ``data: [DONE]``. Network reads cut that stream anywhere, even inside a UTF-8 character or
between ``\\r`` and ``\\n``, so the parser buffers bytes and yields an event only once its
terminating blank line has arrived. The trade-off: an event is seen when its *last* byte
arrives, which is exactly when a real client could act on it, so timing tokens at that moment
measures what a user sees. Only ``data`` matters here (``event``/``id``/``retry`` are ignored:
the OpenAI wire format does not use them).

    >>> p = SseParser(); p.feed(b"data: a\\n\\nda"), p.feed(b"ta: b\\r\\n\\r\\n")
    (['a'], ['b'])
"""

from __future__ import annotations

import re

_LINE_END = re.compile(rb"\r\n|\r|\n")
MAX_EVENT_BYTES = 1 << 20  # a server that never ends an event must not grow our buffer forever


class SseError(ValueError):
    """The stream is not valid SSE for our purpose (an event larger than MAX_EVENT_BYTES)."""


class SseParser:
    """Incremental parser: ``feed(chunk)`` returns the data payloads completed by that chunk."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buf += chunk
        out: list[str] = []
        pos = 0
        while m := _LINE_END.search(self._buf, pos):
            # A lone "\r" at the very end may be the first half of "\r\n": wait for the next byte.
            if m.group() == b"\r" and m.end() == len(self._buf):
                break
            line = self._buf[pos : m.start()]
            pos = m.end()
            if not line:  # blank line: the event is complete
                if self._data:
                    out.append(b"\n".join(self._data).decode("utf-8"))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            # ":comment", "event:", "id:", "retry:" and unknown fields are ignored (the spec says so).
        self._buf = self._buf[pos:]
        if len(self._buf) + sum(len(d) for d in self._data) > MAX_EVENT_BYTES:
            raise SseError(f"an SSE event exceeded {MAX_EVENT_BYTES} bytes")
        return out
