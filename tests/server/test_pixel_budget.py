"""The decoded-pixel budget on its own: reservations add up to at most the capacity, a waiter
gets in when bytes come back, waits at most wait_s (then 503 + Retry-After), and an image
larger than the whole budget is 413 at once."""

from __future__ import annotations

import asyncio

import pytest

from openhood.server.errors import APIError
from openhood.server.pixel_budget import PixelBudget


def test_a_waiter_gets_in_when_bytes_come_back():
    async def scenario():
        budget = PixelBudget(100, wait_s=5.0)
        await budget.acquire(60, "images[0]")
        await budget.acquire(40, "images[1]")
        waiter = asyncio.create_task(budget.acquire(50, "images[2]"))
        await asyncio.sleep(0.05)
        assert not waiter.done() and budget.in_use == 100  # spent: it waits
        budget.release(40)
        await asyncio.sleep(0.05)
        assert not waiter.done()  # 40 back is not enough for 50
        budget.release(60)
        await asyncio.wait_for(waiter, 1)
        return budget.in_use

    assert asyncio.run(scenario()) == 50


def test_a_spent_budget_is_503_after_the_bounded_wait_and_too_large_is_413():
    async def scenario():
        budget = PixelBudget(100, wait_s=0.1)
        await budget.acquire(100, "images[0]")
        with pytest.raises(APIError) as busy:
            await budget.acquire(1, "images[1]")
        with pytest.raises(APIError) as huge:
            await budget.acquire(101, "images[2]")
        return busy.value, huge.value, budget.in_use

    busy, huge, in_use = asyncio.run(scenario())
    assert (busy.status, busy.code) == (503, "image_memory_busy") and int(busy.headers["Retry-After"]) >= 1
    assert (huge.status, huge.code) == (413, "image_too_large") and huge.message.startswith("images[2] needs")
    assert in_use == 100  # the refused ones reserved nothing
