"""Reading a request body with a byte cap, and noticing a client that went away.

The cap applies before parsing (413 as soon as the size is known to exceed it: from
``Content-Length`` or while streaming), so a huge body never reaches the JSON parser. The
trade-off: the body is read by hand rather than by FastAPI's dependency injection.
"""

from __future__ import annotations

from starlette.requests import Request

from openhood.server.errors import APIError


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) as soon as it is known to exceed ``limit`` — before parsing."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int, limit: int) -> APIError:
    return APIError(413, f"request body is {size} bytes or more; the limit is {limit} bytes", code="body_too_large", param=None)


async def wait_disconnect(receive) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass
