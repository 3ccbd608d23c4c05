"""The image routes' decode path: header → memory reservation → a ``DecodePool`` worker → crop.

Per image of a request, concurrently: ``ImagePreprocessor.cost`` reads the header (bombs and
non-images are refused here, nothing decoded) → ``PixelBudget.acquire`` reserves that many bytes
(wait, 503, or 413) → the pool's worker process decodes, resizes and crops into a shared-memory
slot → the uint8 (crop, crop, 3) crop is copied out and the slot freed. The reservation is given
back when the worker is done with the image, even if the request has gone by then, so the
budget always covers what the workers hold.

Decoding in worker processes rather than threads: full-size pixels (~250 MB for one 62-Mpx
PNG) never enter the server process, whose allocator kept the freed pages (five such PNGs
decoded in threads: RSS +2.5–2.7 GB at the peak, +0.9–1.0 GB after; in two workers: +0.5 GB
and +0.01 GB), and a decoder crash or an OOM kill costs one worker, which the pool replaces,
retrying its image once. The price: ~40 MB of RSS per idle worker, ~0.3 s of imports per
worker at start, and one copy of each 150 KB crop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import numpy as np

from openhood.data.image import CorruptImage, ImageTooLarge, NotAnImage
from openhood.data.pool import Decoded, DecodeFailed, DecodePool, PoolClosed, PoolError, PoolFull, WorkerCrashed
from openhood.models.image_classify import BadImage, ImagePreprocessor
from openhood.models.served import Prepared
from openhood.server.errors import APIError, draining
from openhood.server.pixel_budget import PixelBudget

RETRY_AFTER_S = 1


class ImageDecoder:
    """One image model's decode pool, admitting images through the server's shared budget."""

    def __init__(self, pre: ImagePreprocessor, budget: PixelBudget, *, workers: int, queue_depth: int):
        self.pre, self.budget = pre, budget
        self.pool = DecodePool(pre.spec, workers=workers, queue_depth=queue_depth, max_pixels=pre.max_pixels)

    async def prepare(self, blobs: Sequence[bytes]) -> Prepared:
        """Every image decoded and cropped; the first bad one (by index) fails the request."""
        costs = [self.pre.cost(i, b) for i, b in enumerate(blobs)]  # header errors first, nothing reserved
        for i, cost in enumerate(costs):
            self.budget.check(cost, f"images[{i}]")  # the 413, before any other image waits
        results = await asyncio.gather(
            *(self._one(i, b, c) for i, (b, c) in enumerate(zip(blobs, costs, strict=True))), return_exceptions=True
        )
        for r in results:  # every image has finished: nothing is left running for a failed request
            if isinstance(r, BaseException):
                raise r
        return self.pre.prepared(results)  # type: ignore[arg-type]

    async def _one(self, index: int, data: bytes, cost: int) -> np.ndarray:
        await self.budget.acquire(cost, f"images[{index}]")
        try:
            fut = self.pool.submit(data, timeout=0)
        except PoolError as exc:  # full, closed, or broken (a worker died while starting)
            self.budget.release(cost)
            raise _pool_error(index, exc) from None
        loop = asyncio.get_running_loop()
        fut.add_done_callback(lambda _: _call_soon(loop, self.budget.release, cost))
        try:
            decoded: Decoded = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_release_slot)  # the worker may still land it: free its slot then
            raise
        except (NotAnImage, CorruptImage, ImageTooLarge) as exc:
            raise BadImage(index, exc) from None
        except PoolError as exc:
            raise _pool_error(index, exc) from None
        with decoded:
            assert decoded.array is not None  # a result's array is set until it is released
            return decoded.array.copy()  # (crop, crop, 3) uint8, out of the shared slot

    def close(self) -> None:
        self.pool.close()


def _pool_error(index: int, exc: PoolError) -> APIError:
    """The decode pool's own failures → this request's error; the server goes on."""
    if isinstance(exc, DecodeFailed):  # the decoder raised on these bytes
        return APIError(422, f"images[{index}]: the decoder failed: {exc}", code="invalid_image", param="images")
    if isinstance(exc, PoolFull):
        return APIError(
            429,
            f"{exc}; retry later",
            type="rate_limit_error",
            code="queue_full",
            param=None,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if isinstance(exc, PoolClosed):
        return draining()
    return APIError(  # WorkerCrashed (twice on this image), or a pool whose workers cannot start
        503,
        f"images[{index}]: {exc}",
        type="server_error",
        code="decode_worker_crashed" if isinstance(exc, WorkerCrashed) else "decode_unavailable",
        param=None,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[int], None], arg: int) -> None:
    """From the pool's thread onto the event loop; after the loop has closed there is no one left to tell."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, arg)


def _release_slot(fut: Future[Decoded]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().release()
