"""``--sweep``: find the highest open-loop rate that meets the SLO.

Three phases, all seeded:
1. **step**: start at ``start`` req/s and multiply by ``factor`` until a run fails the SLO (or
   ``max_rate`` passes), giving a bracket [last pass, first fail];
2. **bisect**: halve the bracket ``bisect_steps`` times (stopping early once it is within 5%);
3. **repeat**: rerun the best passing rate ``repeats`` times with other seeds (other arrival
   patterns and text draws), so the report shows how stable that boundary is.

Step and bisect runs use the base seed: the same seed at another rate is the same arrival
pattern scaled in time and the same texts, so the runs differ only in load. The trade-off:
each run costs its full warm-up + duration, so a sweep is roughly (steps + bisects + repeats)
runs long; short runs (10-15 s) are noisy near the boundary, which is what the repeats show.
"""

from __future__ import annotations

from collections.abc import Callable


def _row(phase: str, rate: float, seed: int, summary: dict) -> dict:
    lat = summary["latency_ms"]
    ratios = [b["ratio"] for b in summary["buckets"]
              if b["bucket"] in summary["slo"]["buckets_checked"] and b["ratio"] is not None]
    return {"phase": phase, "rate": rate, "seed": seed, "pass": summary["slo"]["pass"],
            "reasons": summary["slo"]["reasons"], "throughput_rps": summary["throughput_rps"],
            "p50": lat["p50"], "p99": lat["p99"], "ratio": lat["ratio"],
            "worst_bucket_ratio": max(ratios) if ratios else None, "errors": summary["error_count"]}


def rate_sweep(run_at: Callable[[float, int], tuple[object, dict]], *, start: float, max_rate: float,
               seed: int, factor: float = 2.0, bisect_steps: int = 3, repeats: int = 2,
               p99_budget_ms: float, log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the sweep; ``run_at(rate, seed)`` runs one load test and returns (result, summary).

    Returns the run table, the best rate, and the (result, summary) of the best rate's run
    under the key ``"best"`` (None when no rate passed) for the report.
    """
    if not (0 < start <= max_rate):
        raise ValueError(f"need 0 < --sweep-start <= --sweep-max, got {start} and {max_rate}")
    if factor <= 1:
        raise ValueError("--sweep-factor must be > 1")
    runs: list[dict] = []
    results: dict[float, tuple] = {}

    def attempt(phase: str, rate: float, s: int) -> bool:
        result, summary = run_at(rate, s)
        row = _row(phase, rate, s, summary)
        runs.append(row)
        log(f"sweep {phase:>6} {rate:8.1f} req/s: {'PASS' if row['pass'] else 'FAIL'} "
            f"(P99 {row['p99'] or 0:.0f} ms, {row['throughput_rps']:.1f} req/s) {'; '.join(row['reasons'])}")
        if row["pass"] and rate not in results:
            results[rate] = (result, summary)
        return row["pass"]

    lo, hi = 0.0, None
    rate = start
    while True:
        if attempt("step", rate, seed):
            lo = rate
            if rate >= max_rate:
                break
            rate = round(min(rate * factor, max_rate), 1)
        else:
            hi = rate
            break
    if hi is not None:
        for _ in range(bisect_steps):
            if lo > 0 and (hi - lo) / hi < 0.05:
                break
            mid = round((lo + hi) / 2, 1)
            if mid <= lo or mid >= hi:
                break
            if attempt("bisect", mid, seed):
                lo = mid
            else:
                hi = mid
    passes = 0
    if lo > 0:
        for r in range(1, repeats + 1):
            passes += attempt("repeat", lo, seed + r)
    at_best = [r for r in runs if lo > 0 and r["rate"] == lo]
    return {
        "best_rate": lo if lo > 0 else None, "first_failing_rate": hi,
        "repeat_passes": passes, "repeats_run": repeats if lo > 0 else 0,
        "p99_spread_at_best_ms": ([min(r["p99"] for r in at_best), max(r["p99"] for r in at_best)]
                                  if at_best else None),
        "p99_budget_ms": p99_budget_ms, "runs": runs,
        "best": results.get(lo),
    }


def format_sweep(sweep: dict) -> str:
    lines = [f"{'phase':>7} {'offered':>9} {'seed':>5} {'achieved':>9} {'P50 ms':>8} {'P99 ms':>8} "
             f"{'P99/P50':>8} {'worst bkt':>9} {'err':>5}  SLO"]
    for r in sweep["runs"]:
        f = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
        lines.append(f"{r['phase']:>7} {r['rate']:9.1f} {r['seed']:>5} {r['throughput_rps']:9.1f} {f(r['p50']):>8} "
                     f"{f(r['p99']):>8} {f(r['ratio'], '.2f'):>8} {f(r['worst_bucket_ratio'], '.2f'):>9} "
                     f"{r['errors']:>5}  {'PASS' if r['pass'] else 'FAIL'}")
    best = sweep["best_rate"]
    if best is None:
        lines.append("no offered rate met the SLO")
    else:
        spread = sweep["p99_spread_at_best_ms"]
        lines.append(f"highest rate meeting the SLO: {best:.1f} req/s (repeats passed "
                     f"{sweep['repeat_passes']}/{sweep['repeats_run']}; P99 at that rate "
                     f"{spread[0]:.0f}-{spread[1]:.0f} ms)")
    return "\n".join(lines)
