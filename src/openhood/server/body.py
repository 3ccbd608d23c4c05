"""Reading a request body with a byte cap and a deadline, and noticing a client that went away.

- The cap applies before parsing (413 as soon as the size is known to exceed it: from
  ``Content-Length`` or while streaming), so a huge body never reaches the JSON parser.
- Not complete within ``timeout_s``: 408 with ``Connection: close`` (the rest of the body would
  otherwise be read as the next request). A stalled client thus holds a slot, and a drain, for
  the body timeout, never for the whole grace period.
- The client disconnects mid-body: ``ClientGone``, which the app answers 499 (nginx's "client
  closed request") and logs as a disconnect, not as a 500 with a traceback.

The trade-off: the body is read by hand rather than by FastAPI's dependency injection.
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from openhood.server.errors import APIError, ClientGone


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refusing (413) as soon as it is known to exceed ``limit`` — before parsing —
    and (408) when it is not complete within ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(size, limit)
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(
            408,
            f"request body not received within {timeout_s:g} s",
            code="body_timeout",
            param=None,
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


def too_large(size: int, limit: int) -> APIError:
    """413, and the connection closes after it: the rest of the refused body is never read (kept
    open, the server would go on swallowing whatever the client sends)."""
    return APIError(
        413,
        f"request body is {size} bytes or more; the limit is {limit} bytes",
        code="body_too_large",
        param=None,
        headers={"Connection": "close"},
    )


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass
