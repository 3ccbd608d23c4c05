import pytest

from openhood.loadtest.client import CONNECT_TIMEOUT_S, MAX_POOL, make_client, plan_client


def test_open_loop_pool_is_rate_times_budget_times_two():
    plan = plan_client(rate=100, concurrency=None, p99_budget_s=0.5)
    assert plan.max_connections == 100  # 100 req/s x 0.5 s x 2
    assert plan.connect_timeout == CONNECT_TIMEOUT_S == 3.05
    assert plan.read_timeout == pytest.approx(1.5)  # 3 x expected P99
    assert plan.pool_timeout == plan.read_timeout


def test_closed_loop_pool_is_the_client_count_and_bounds_hold():
    assert plan_client(rate=None, concurrency=7, p99_budget_s=0.5).max_connections == 7
    assert plan_client(rate=10_000, concurrency=None, p99_budget_s=5).max_connections == MAX_POOL
    assert plan_client(rate=0.1, concurrency=None, p99_budget_s=0.1).max_connections == 2


def test_user_overrides_win():
    plan = plan_client(rate=100, concurrency=None, p99_budget_s=0.5, timeout_s=10, max_connections=9)
    assert (plan.max_connections, plan.read_timeout) == (9, 10)
    with pytest.raises(ValueError):
        plan_client(rate=None, concurrency=None, p99_budget_s=0.5)
    with pytest.raises(ValueError):
        plan_client(rate=1, concurrency=None, p99_budget_s=0)


def test_client_carries_the_plan():
    plan = plan_client(rate=None, concurrency=3, p99_budget_s=0.2)
    client = make_client(plan)
    try:
        assert client.timeout.connect == 3.05
        assert client.timeout.read == pytest.approx(0.6)
        assert client.timeout.pool == pytest.approx(0.6)
        assert client._transport._pool._max_connections == 3
    finally:
        import asyncio

        asyncio.run(client.aclose())
