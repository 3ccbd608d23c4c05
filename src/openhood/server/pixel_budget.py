"""Admission control for decoded image memory: one byte budget shared by every in-flight image.

Each image reserves the bytes its decode will hold at its peak (``data.image.decode_cost``, read
from the header before a pixel is decoded) and gives them back when its decoder is done. An image
that does not fit waits up to ``wait_s`` for others to finish, then gets 503 + ``Retry-After``;
an image larger than the whole budget can never fit and gets 413 at once. The decoded pixels
live in the decode workers, so this bounds their memory, whatever the request mix.

Runs on the event loop thread only (no lock): ``release`` is called there too (the decoder
schedules it with ``call_soon_threadsafe``). The trade-off: not first-in first-out — every
waiter re-checks when bytes come back, so a small image may pass a large one that still does
not fit; the large one's wait is bounded by ``wait_s`` all the same.
"""

from __future__ import annotations

import asyncio

from openhood.server.errors import APIError

MIB = 2**20
RETRY_AFTER_S = 2  # a spent budget frees as its decodes finish: a few seconds for large images


class PixelBudget:
    def __init__(self, capacity: int, wait_s: float):
        if capacity < 1:
            raise ValueError(f"the image memory budget must be >= 1 byte, got {capacity}")
        self.capacity, self.wait_s = capacity, wait_s
        self.in_use = 0
        self._freed = asyncio.Event()  # set (and replaced) whenever bytes come back

    def check(self, nbytes: int, what: str) -> None:
        """413 when ``nbytes`` for ``what`` (e.g. "images[3]") can never fit."""
        if nbytes > self.capacity:
            raise APIError(
                413,
                f"{what} needs {nbytes / MIB:,.0f} MiB to decode (from its header's size), more than "
                f"this server's whole image memory budget of {self.capacity / MIB:,.0f} MiB "
                "(--image-memory-mb); send a smaller image",
                code="image_too_large",
                param="images",
            )

    async def acquire(self, nbytes: int, what: str) -> None:
        """Reserve ``nbytes`` for ``what``: 413 if it can never fit, 503 if it does not fit
        within ``wait_s``."""
        self.check(nbytes, what)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self.in_use + nbytes > self.capacity:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                await asyncio.wait_for(self._freed.wait(), left)
            except TimeoutError:
                raise APIError(
                    503,
                    f"the image memory budget ({self.capacity / MIB:,.0f} MiB) stayed spent by other "
                    f"requests' images for {self.wait_s:g} s; retry later",
                    type="server_error",
                    code="image_memory_busy",
                    param=None,
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                ) from None
        self.in_use += nbytes

    def release(self, nbytes: int) -> None:
        self.in_use -= nbytes
        freed, self._freed = self._freed, asyncio.Event()
        freed.set()
