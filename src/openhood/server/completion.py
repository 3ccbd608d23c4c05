"""A request's item futures (worker threads) → one asyncio future (event loop), one thread hop.

``asyncio.gather(*map(asyncio.wrap_future, futures))`` costs, per item, a wrapping asyncio
future, two chained callbacks and a ``call_soon_threadsafe`` (a write to the loop's wake-up
pipe), plus the gathering future on top. Here each worker thread only decrements a counter;
whoever finishes the request's last item makes the single hop to the loop, which then reads
every result. Cancelling the returned future cancels the items (the worker drops those it has
not started: the client went away). The trade-off: results are delivered all at once, which is
all a handler needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def gather_items(futures: Sequence[Future[T]]) -> asyncio.Future[list[T]]:
    """An asyncio future of every item's result in order (or the first item's exception)."""
    loop = asyncio.get_running_loop()
    out: asyncio.Future[list[T]] = loop.create_future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def settle() -> None:  # on the loop
        if out.done():
            return
        try:
            out.set_result([f.result() for f in futures])
        except BaseException as exc:  # the handler decides (BatchFailedError → 500)
            out.set_exception(exc)

    def item_done(_: Future[T]) -> None:  # on a worker thread (or the loop, if already done)
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            with contextlib.suppress(RuntimeError):  # the loop closed (shutdown): nobody is waiting any more
                loop.call_soon_threadsafe(settle)

    def on_out_done(o: asyncio.Future[list[T]]) -> None:
        if o.cancelled():
            for f in futures:
                f.cancel()

    out.add_done_callback(on_out_done)
    if not futures:
        out.set_result([])
    for f in futures:
        f.add_done_callback(item_done)
    return out
