"""``--sweep``: find the highest open-loop rate that meets the SLO, each rate judged on repeats.

Every probed rate is run ``repeats`` times with the seeds ``seed``, ``seed + 1``, …; it passes
when at least ``need`` of those runs pass (default: a majority), so one unlucky run neither
makes nor breaks a rate, and the spread of P99 and of the worst bucket's P99/P50 over the
repeats is reported beside the verdict. Two phases:
1. **step**: start at ``start`` req/s and multiply by ``factor`` until a rate fails (or
   ``max_rate`` passes), giving a bracket [last pass, first fail];
2. **bisect**: halve the bracket ``bisect_steps`` times (stopping early once it is within 5%).

Every rate uses the same seeds: the same seed at another rate is the same arrival pattern scaled
in time and the same texts, so rates differ only in load. The trade-off: each run costs its
full warm-up + duration, so a sweep is (steps + bisections) × repeats runs long; runs must be
long enough for the buckets the SLO checks to hold their ``min_samples`` (500 by default).
"""

from __future__ import annotations

from collections.abc import Callable


def _row(phase: str, rate: float, seed: int, summary: dict) -> dict:
    lat = summary["latency_ms"]
    ratios = [
        b["ratio"]
        for b in summary["buckets"]
        if b["bucket"] in summary["slo"]["buckets_checked"] and b["ratio"] is not None
    ]
    return {
        "phase": phase,
        "rate": rate,
        "seed": seed,
        "pass": summary["slo"]["pass"],
        "reasons": summary["slo"]["reasons"],
        "throughput_rps": summary["throughput_rps"],
        "p50": lat["p50"],
        "p99": lat["p99"],
        "ratio": lat["ratio"],
        "worst_bucket_ratio": max(ratios) if ratios else None,
        "errors": summary["error_count"],
        "buckets_checked": summary["slo"]["buckets_checked"],
    }


def bisect_rate(
    passes: Callable[[float], bool], *, start: float, max_rate: float, factor: float = 2.0, bisect_steps: int = 3
) -> tuple[float | None, float | None]:
    """(highest passing rate, lowest failing rate) found by stepping then bisecting; ``passes(rate)``
    is the verdict at one rate (all its repeats). None where no rate passed / none failed.

    >>> bisect_rate(lambda r: r <= 37, start=10, max_rate=1000, bisect_steps=3)
    (35.0, 37.5)
    """
    if not (0 < start <= max_rate):
        raise ValueError(f"need 0 < --sweep-start <= --sweep-max, got {start} and {max_rate}")
    if factor <= 1:
        raise ValueError("--sweep-factor must be > 1")
    lo, hi = 0.0, None
    rate = start
    while True:
        if passes(rate):
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
            if passes(mid):
                lo = mid
            else:
                hi = mid
    return (lo if lo > 0 else None), hi


def rate_sweep(
    run_at: Callable[[float, int], tuple[object, dict]],
    *,
    start: float,
    max_rate: float,
    seed: int,
    factor: float = 2.0,
    bisect_steps: int = 3,
    repeats: int = 3,
    need: int | None = None,
    p99_budget_ms: float,
    log: Callable[[str], None] = lambda s: None,
) -> dict:
    """Run the sweep; ``run_at(rate, seed)`` runs one load test and returns (result, summary).

    Returns the run table, one verdict per rate, the best rate with its spread over the
    repeats, and the (result, summary) of a passing run at the best rate under ``"best"`` (None
    when no rate passed) for the report.
    """
    repeats = max(1, repeats)
    need = repeats // 2 + 1 if need is None else need
    if not 1 <= need <= repeats:
        raise ValueError(f"need must be in [1, repeats={repeats}], got {need}")
    runs: list[dict] = []
    rates: list[dict] = []
    best_runs: dict[float, tuple] = {}
    phase = ["step"]

    def passes(rate: float) -> bool:
        rows = []
        for k in range(repeats):
            result, summary = run_at(rate, seed + k)
            row = _row(phase[0], rate, seed + k, summary)
            runs.append(row)
            rows.append(row)
            if row["pass"] and rate not in best_runs:
                best_runs[rate] = (result, summary)
            log(
                f"sweep {phase[0]:>6} {rate:8.1f} req/s seed {seed + k}: {'PASS' if row['pass'] else 'FAIL'} "
                f"(P99 {row['p99'] or 0:.0f} ms, {row['throughput_rps']:.1f} req/s) {'; '.join(row['reasons'])}"
            )
        n_pass = sum(r["pass"] for r in rows)
        ok = n_pass >= need
        rates.append({"phase": phase[0], "rate": rate, "passes": n_pass, "runs": repeats, "pass": ok})
        if not ok:
            phase[0] = "bisect"  # the step phase ends at its first failure; later probes bisect
        return ok

    best, first_fail = bisect_rate(passes, start=start, max_rate=max_rate, factor=factor, bisect_steps=bisect_steps)
    at_best = [r for r in runs if best is not None and r["rate"] == best]
    worst = [r["worst_bucket_ratio"] for r in at_best if r["worst_bucket_ratio"] is not None]
    return {
        "best_rate": best,
        "first_failing_rate": first_fail,
        "need": need,
        "repeat_passes": sum(r["pass"] for r in at_best),
        "repeats_run": len(at_best),
        "p99_spread_at_best_ms": [min(r["p99"] for r in at_best), max(r["p99"] for r in at_best)] if at_best else None,
        "worst_bucket_ratio_spread_at_best": [min(worst), max(worst)] if worst else None,
        "p99_budget_ms": p99_budget_ms,
        "runs": runs,
        "rates": rates,
        "best": best_runs.get(best) if best is not None else None,
    }


def format_sweep(sweep: dict) -> str:
    f = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
    lines = [
        f"{'phase':>7} {'offered':>9} {'seed':>5} {'achieved':>9} {'P50 ms':>8} {'P99 ms':>8} "
        f"{'P99/P50':>8} {'worst bkt':>9} {'err':>5}  SLO"
    ]
    for r in sweep["runs"]:
        lines.append(
            f"{r['phase']:>7} {r['rate']:9.1f} {r['seed']:>5} {r['throughput_rps']:9.1f} {f(r['p50']):>8} "
            f"{f(r['p99']):>8} {f(r['ratio'], '.2f'):>8} {f(r['worst_bucket_ratio'], '.2f'):>9} "
            f"{r['errors']:>5}  {'PASS' if r['pass'] else 'FAIL'}"
        )
    lines.append(
        "per rate (pass = at least {} of its repeats passed): ".format(sweep["need"])
        + ", ".join(
            f"{r['rate']:g} {r['passes']}/{r['runs']} {'PASS' if r['pass'] else 'FAIL'}" for r in sweep["rates"]
        )
    )
    best = sweep["best_rate"]
    if best is None:
        lines.append("no offered rate met the SLO")
    else:
        spread = sweep["p99_spread_at_best_ms"]
        worst = sweep["worst_bucket_ratio_spread_at_best"]
        lines.append(
            f"highest rate meeting the SLO: {best:.1f} req/s (repeats passed "
            f"{sweep['repeat_passes']}/{sweep['repeats_run']}; P99 at that rate "
            f"{spread[0]:.0f}-{spread[1]:.0f} ms; worst bucket P99/P50 "
            f"{'-' if worst is None else f'{worst[0]:.2f}-{worst[1]:.2f}'})"
        )
    return "\n".join(lines)
