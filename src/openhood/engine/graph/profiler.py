"""Per-op profiler: where a forward pass spends its time, against what the machine can do.

The executor calls ``OpProfile.record(node, seconds, flops)`` around every node; the report
groups by op type (``Linear+Gelu``, ``Attention``, …) with calls, time, share of the total,
arithmetic, achieved GFLOP/s and the percentage of this machine's float32 GEMM peak, which is
measured at start with a large sgemm (same BLAS, same threads, same moment). The trade-off:
timing every node costs two ``perf_counter`` calls per node (~60 per forward): invisible beside
millisecond kernels, and the un-instrumented path skips it entirely.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openhood.engine.graph.graph import Graph, Node
from openhood.engine.graph.runtime import Executor


def measure_gemm_peak(n: int = 1536, seconds: float = 0.6) -> float:
    """Best achieved float32 GFLOP/s of an (n, n) @ (n, n) sgemm over ~``seconds``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=c)  # warm-up: BLAS threads started, pages touched
    best = float("inf")
    deadline = time.perf_counter() + seconds
    runs = 0
    while runs < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return 2.0 * n**3 / best / 1e9


@dataclass
class OpProfile:
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # seconds per model block (node.attrs["block"], e.g. "blocks.3"), for graphs that tag them
    block_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    forwards: int = 0

    def record(self, node: Node, seconds: float, flops: int) -> None:
        self.calls[node.label] += 1
        self.seconds[node.label] += seconds
        self.flops[node.label] += flops
        block = node.attrs.get("block")
        if block is not None:
            self.block_seconds[block] += seconds

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def rows(self, peak_gflops: float) -> list[dict[str, Any]]:
        """One dict per op type, most expensive first; times are per forward pass."""
        n = max(1, self.forwards)
        total = self.total_seconds or 1e-12
        out = []
        for label, sec in sorted(self.seconds.items(), key=lambda kv: -kv[1]):
            gflops = self.flops[label] / sec / 1e9 if sec > 0 else 0.0
            out.append(
                {
                    "op": label,
                    "calls": self.calls[label] // n,
                    "ms": sec / n * 1e3,
                    "pct": 100.0 * sec / total,
                    "gflop": self.flops[label] / n / 1e9,
                    "gflops": gflops,
                    "pct_peak": 100.0 * gflops / peak_gflops if peak_gflops else 0.0,
                }
            )
        return out

    def table(self, peak_gflops: float, title: str = "") -> str:
        lines = [title] if title else []
        lines.append(f"{'op':<22}{'calls':>6}{'ms':>10}{'% total':>9}{'GFLOP':>9}{'GFLOP/s':>9}{'% peak':>8}")
        for r in self.rows(peak_gflops):
            lines.append(
                f"{r['op']:<22}{r['calls']:>6}{r['ms']:>10.2f}{r['pct']:>9.1f}{r['gflop']:>9.3f}{r['gflops']:>9.1f}{r['pct_peak']:>8.1f}"
            )
        n = max(1, self.forwards)
        flops = sum(self.flops.values()) / n
        sec = self.total_seconds / n
        lines.append(
            f"{'total':<22}{sum(self.calls.values()) // n:>6}{sec * 1e3:>10.2f}{100.0:>9.1f}{flops / 1e9:>9.3f}"
            f"{flops / sec / 1e9:>9.1f}{100.0 * flops / sec / 1e9 / peak_gflops:>8.1f}"
        )
        return "\n".join(lines)


def block_table(unfused: OpProfile, fused: OpProfile) -> str:
    """Per-block ms per forward, unfused beside fused, in graph order (blocks as first recorded)."""
    lines = [f"{'block':<14}{'unfused ms':>11}{'fused ms':>10}{'speed-up':>10}"]
    nu, nf = max(1, unfused.forwards), max(1, fused.forwards)
    for block in unfused.block_seconds:
        u = unfused.block_seconds[block] / nu * 1e3
        f = fused.block_seconds.get(block, 0.0) / nf * 1e3
        lines.append(f"{block:<14}{u:>11.2f}{f:>10.2f}{u / f if f else 0.0:>9.2f}x")
    u, f = unfused.total_seconds / nu * 1e3, fused.total_seconds / nf * 1e3
    lines.append(f"{'total':<14}{u:>11.2f}{f:>10.2f}{u / f if f else 0.0:>9.2f}x")
    return "\n".join(lines)


def profile_graph(graph: Graph, feeds: dict[str, np.ndarray], runs: int = 3, threads: int | None = None) -> OpProfile:
    """Warm up once, then profile ``runs`` forward passes."""
    with Executor(graph, threads) as ex:
        ex.run(feeds)
        prof = OpProfile()
        for _ in range(runs):
            ex.run(feeds, profiler=prof)
            prof.forwards += 1
        return prof


def random_batch(
    batch: int, seq: int, vocab: int = 30522, padded_fraction: float = 0.0, seed: int = 0
) -> dict[str, np.ndarray]:
    """Synthetic (B, T) ids/mask: random word pieces, the last ``padded_fraction`` of rows padded by half."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    for i in range(int(batch * padded_fraction)):
        mask[batch - 1 - i, seq // 2 :] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}
