"""Reading a request body with a byte cap, a deadline, and a client that may vanish half-way.

- Over ``limit`` bytes (declared or counted): 413 before anything is parsed.
- Not complete within ``timeout_s`` of the handler asking for it: 408 with ``Connection: close``
  (the rest of the body would otherwise be read as the next request). A stalled client thus
  holds a worker slot, and a drain, for the body timeout, never for the whole grace period.
- The client disconnects mid-body: ``ClientGone``, which the app answers 499 (nginx's "client
  closed request") and logs as a disconnect, not as a 500 with a traceback.
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request

from openhood.server.errors import APIError


class ClientGone(Exception):
    """The client closed the connection before the response: nothing to answer, nothing broke."""


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit)
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(408, f"request body not received within {timeout_s:g} s", code="body_timeout", param=None,
                       headers={"Connection": "close"}) from None
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> APIError:
    return APIError(413, f"request body is {size} bytes or more; the limit is {limit} bytes", code="body_too_large", param=None)
