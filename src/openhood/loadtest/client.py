"""The load generator's HTTP client: a bounded connection pool and explicit timeouts.

Sizing rules for any HTTP client of a model server, applied to our own:
- pool ≈ offered QPS × expected latency × 2. In closed-loop mode the pool is exactly the number
  of clients (each holds one connection). In open-loop mode the "expected latency" is the P99
  budget: a request in flight longer than that already fails the SLO, so twice the in-flight
  count at the budget is enough headroom. Bounded to [2, MAX_POOL] so a typo in ``--rate`` can
  not open thousands of sockets.
- connect timeout 3.05 s: just over TCP's 3 s initial retransmit, so one lost SYN is retried.
- read timeout ≈ 3 × expected P99 (3 × the budget), overridable with ``--timeout``.
- pool timeout = read timeout: a request that cannot even get a connection for that long is
  counted as an error (``pool_timeout``), which bounds how many requests can pile up.

The trade-off: if the pool is too small for the server's real latency, requests wait for a
connection on *our* side. That wait is still counted, because open-loop latency is timed from
the scheduled arrival, so an undersized pool shows up as latency, never as a hidden stall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONNECT_TIMEOUT_S = 3.05
MAX_POOL = 512
MIN_POOL = 2


@dataclass(frozen=True)
class ClientPlan:
    max_connections: int
    connect_timeout: float
    read_timeout: float
    pool_timeout: float

    def describe(self) -> str:
        return (
            f"pool={self.max_connections} connect={self.connect_timeout:g}s "
            f"read={self.read_timeout:g}s pool-wait={self.pool_timeout:g}s"
        )


def plan_client(
    *,
    rate: float | None,
    concurrency: int | None,
    p99_budget_s: float,
    timeout_s: float | None = None,
    max_connections: int | None = None,
) -> ClientPlan:
    """Pool and timeouts for one run (see the module docstring for the rules)."""
    if p99_budget_s <= 0:
        raise ValueError("the P99 budget must be > 0")
    read = timeout_s if timeout_s is not None else 3.0 * p99_budget_s
    if read <= 0:
        raise ValueError("--timeout must be > 0")
    if max_connections is None:
        if concurrency is not None:
            max_connections = concurrency
        elif rate is not None:
            max_connections = math.ceil(rate * p99_budget_s * 2)
        else:
            raise ValueError("give a rate (open loop) or a concurrency (closed loop)")
    pool = max(MIN_POOL, min(MAX_POOL, int(max_connections)))
    return ClientPlan(max_connections=pool, connect_timeout=CONNECT_TIMEOUT_S, read_timeout=read, pool_timeout=read)


def make_client(plan: ClientPlan):
    """An ``httpx.AsyncClient`` with the plan's limits and timeouts (httpx imported lazily)."""
    import httpx

    limits = httpx.Limits(
        max_connections=plan.max_connections, max_keepalive_connections=plan.max_connections, keepalive_expiry=30.0
    )
    timeout = httpx.Timeout(
        connect=plan.connect_timeout, read=plan.read_timeout, write=plan.read_timeout, pool=plan.pool_timeout
    )
    # trust_env=False: a proxy variable in the environment must not reroute loopback traffic.
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
