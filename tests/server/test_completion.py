"""gather_items: item futures resolved on other threads → one asyncio future, in order; errors; cancellation."""

import asyncio
import threading
from concurrent.futures import Future

import pytest

from openhood.server.completion import gather_items


def test_results_in_order_after_the_last_item_from_worker_threads():
    async def main():
        futures = [Future() for _ in range(5)]
        out = gather_items(futures)
        for i in (3, 1, 4, 0):
            threading.Thread(target=futures[i].set_result, args=(i * 10,)).start()
        await asyncio.sleep(0.05)
        assert not out.done()  # one item still running
        threading.Thread(target=futures[2].set_result, args=(20,)).start()
        return await asyncio.wait_for(out, 5)

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]


def test_an_item_error_is_the_request_error_and_cancelling_cancels_the_items():
    async def main():
        failing = [Future(), Future()]
        out = gather_items(failing)
        failing[0].set_result(1)
        failing[1].set_exception(RuntimeError("batch failed"))
        with pytest.raises(RuntimeError, match="batch failed"):
            await asyncio.wait_for(out, 5)
        pending = [Future(), Future()]
        gone = gather_items(pending)
        gone.cancel()  # the client went away
        await asyncio.sleep(0)
        assert all(f.cancelled() for f in pending)
        assert await gather_items([]) == []

    asyncio.run(main())
