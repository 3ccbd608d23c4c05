"""``GET /debug/memory``: the leak-hunting endpoint, registered only with ``--debug-endpoints``.

Returns what grew since the previous call (``server.memory_probe``): the top ``?top=N``
allocation sites (``file:line``, size and count delta), gc object counts by type (most numerous
and fastest growing), RSS/USS, open fds and threads. It sits behind the API key when one is set
(the middleware gates ``/debug/``). The trade-off: off by default, because tracemalloc slows
every allocation and the endpoint reveals source paths.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from starlette.responses import Response

from openhood.server.errors import json_response
from openhood.server.memory_probe import DEFAULT_TOP, MemoryProbe
from openhood.server.state import ServerState


def register(app: FastAPI, state: ServerState) -> None:
    probe = MemoryProbe()
    probe.start()

    @app.get("/debug/memory")
    async def memory(top: int = DEFAULT_TOP) -> Response:
        # Off the event loop: a snapshot plus gc.get_objects() takes tens of ms with a model loaded.
        return json_response(await asyncio.to_thread(probe.sample, top))
