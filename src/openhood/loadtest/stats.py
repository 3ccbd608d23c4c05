"""Latency statistics of one run, per input-length bucket, and the SLO verdict.

Why per bucket: on real text, the P99/P50 of the whole population is already 2-3 on an idle
server, because long inputs simply take longer. That ratio says little about the *server*. Within
one length bucket, inputs cost about the same, so a P99 far above the bucket's P50 means waiting
(queueing, a long input blocking short ones, GC, a stalled loop): that is what the SLO checks.

The SLO (issues 5 and 12): no errors, overall P99 <= budget, and in every bucket with >=
``min_samples`` (500) successful requests, P99 <= ``ratio`` (3) x that bucket's P50. The overall
ratio is reported too.

Lengths come from the server's ``usage.prompt_tokens`` (per text = tokens / texts in the
request) when the response has it; otherwise they are estimated as chars / 4 + 2 and the report
says so. Percentiles use NumPy's default linear interpolation; a naive sorted-index reference
(``percentile_reference``) sits beside it and the tests compare them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

# The latency-by-length token buckets are the server's metric labels (LENGTH_LABEL_EDGES: upper
# bounds, inclusive; the last bucket is open): one copy, in the scheduler.
from openhood.scheduler.buckets import LENGTH_LABEL_EDGES, LENGTH_LABELS
from openhood.scheduler.policy import TAIL_RATIO

CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class Slo:
    p99_budget_ms: float = 500.0
    bucket_ratio: float = TAIL_RATIO
    min_samples: int = 500  # issue 12: fewer samples make a bucket's P99 a coin toss


def percentile_reference(values, q: float) -> float:
    """Linear-interpolated percentile, the textbook way (reference for ``np.percentile``).

    >>> percentile_reference([1, 2, 3, 4], 50)
    2.5
    """
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_stats(lat_ms: np.ndarray) -> dict:
    """P50/P90/P99/max/mean (ms) and P99/P50 of a latency sample."""
    if lat_ms.size == 0:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None, "ratio": None}
    p50, p90, p99 = np.percentile(lat_ms, [50, 90, 99])
    return {
        "count": int(lat_ms.size),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(lat_ms.max()),
        "mean": float(lat_ms.mean()),
        "ratio": float(p99 / p50) if p50 > 0 else None,
    }


def tokens_per_text(result) -> tuple[np.ndarray, str]:
    """(N,) tokens per text for each request, and where the numbers came from."""
    n = np.maximum(result.n_texts, 1)
    estimate = result.chars / n / CHARS_PER_TOKEN + 2.0
    have = result.tokens >= 0
    per_text = np.where(have, result.tokens / n, estimate)
    source = "usage.prompt_tokens" if have.any() else f"estimated (chars/{CHARS_PER_TOKEN:g}+2)"
    return per_text, source


def bucket_index(tokens: np.ndarray) -> np.ndarray:
    """0..4 for the buckets 0-32, 33-64, 65-128, 129-256, 257+ (edges inclusive).

    >>> bucket_index(np.array([1, 32, 33, 300])).tolist()
    [0, 0, 1, 4]
    """
    return np.searchsorted(np.asarray(LENGTH_LABEL_EDGES, dtype=np.float64), np.ceil(tokens), side="left")


def summarize(result, slo: Slo = Slo()) -> dict:
    """The JSON summary of one run: throughput, errors, latency, buckets and the SLO verdict."""
    cfg = result.config
    ok = result.ok
    lat_ms = result.latency * 1e3
    errors = Counter(str(s) for s in result.status if s != 200)
    if result.cancelled:
        errors["cancelled"] += result.cancelled
    n_err = sum(errors.values())
    # Achieved throughput over the measured window, or longer if the answers came back later.
    span = cfg.duration
    if result.done.size:
        span = max(span, float(result.done.max()) - cfg.warmup)
    n_ok = int(ok.sum())
    tok, source = tokens_per_text(result)
    idx = bucket_index(tok)
    buckets = []
    for b, name in enumerate(LENGTH_LABELS):
        st = latency_stats(lat_ms[ok & (idx == b)])
        buckets.append({"bucket": name, **st})
    overall = latency_stats(lat_ms[ok])
    summary = {
        "mode": cfg.mode,
        "url": cfg.url,
        "offered_rate": cfg.rate,
        "concurrency": cfg.concurrency,
        "duration_s": cfg.duration,
        "warmup_s": cfg.warmup,
        "batch": cfg.batch,
        "seed": cfg.seed,
        "client": result.plan.describe(),
        "requests": len(result.status) + result.cancelled,
        "ok": n_ok,
        "error_count": n_err,
        "errors": dict(sorted(errors.items())),
        "warmup_requests": result.warmup_requests,
        "throughput_rps": n_ok / span if span > 0 else 0.0,
        "texts_per_s": float(result.n_texts[ok].sum()) / span if span > 0 else 0.0,
        "latency_ms": overall,
        "service_ms": latency_stats(result.service[ok] * 1e3),
        "length_source": source,
        "buckets": buckets,
        # Cores this client kept busy during the run (its CPU seconds over the run's wall time).
        "client_cpu_cores": result.cpu_s / result.wall_s if result.wall_s > 0 else None,
        "window_unix": list(result.window_unix) if result.window_unix else None,
    }
    summary["slo"] = evaluate_slo(summary, slo)
    return summary


def evaluate_slo(summary: dict, slo: Slo) -> dict:
    reasons = []
    overall = summary["latency_ms"]
    if summary["error_count"]:
        reasons.append(f"{summary['error_count']} errors")
    if overall["count"] == 0:
        reasons.append("no successful request")
    elif overall["p99"] > slo.p99_budget_ms:
        reasons.append(f"P99 {overall['p99']:.0f} ms > budget {slo.p99_budget_ms:g} ms")
    checked = []
    for b in summary["buckets"]:
        if b["count"] >= slo.min_samples:
            checked.append(b["bucket"])
            if b["ratio"] is not None and b["ratio"] > slo.bucket_ratio:
                reasons.append(f"bucket {b['bucket']}: P99/P50 {b['ratio']:.2f} > {slo.bucket_ratio:g}")
    return {
        "pass": not reasons,
        "reasons": reasons,
        "p99_budget_ms": slo.p99_budget_ms,
        "bucket_ratio_limit": slo.bucket_ratio,
        "min_samples": slo.min_samples,
        "buckets_checked": checked,
        "overall_ratio": overall["ratio"],
    }


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def format_summary(s: dict) -> str:
    """A human-readable text report (what ``openhood loadtest`` prints without --json)."""
    head = (
        f"open loop, offered {s['offered_rate']:g} req/s"
        if s["mode"] == "open"
        else f"closed loop, {s['concurrency']} clients"
    )
    lat = s["latency_ms"]
    lines = [
        f"{head}, {s['duration_s']:g}s (+{s['warmup_s']:g}s warm-up), {s['batch']} text(s)/request, seed {s['seed']}",
        f"client: {s['client']}",
        f"requests {s['requests']}  ok {s['ok']}  errors {s['error_count']} {s['errors'] or ''}".rstrip(),
        f"throughput {s['throughput_rps']:.1f} req/s ({s['texts_per_s']:.1f} texts/s)",
        f"latency ms  P50 {_fmt(lat['p50'])}  P90 {_fmt(lat['p90'])}  P99 {_fmt(lat['p99'])}  "
        f"max {_fmt(lat['max'])}  P99/P50 {_fmt(lat['ratio'], '.2f')}",
        f"per input-length bucket (tokens, {s['length_source']}):",
        f"  {'bucket':>8} {'n':>6} {'P50':>8} {'P90':>8} {'P99':>8} {'max':>8} {'P99/P50':>8}",
    ]
    for b in s["buckets"]:
        lines.append(
            f"  {b['bucket']:>8} {b['count']:>6} {_fmt(b['p50']):>8} {_fmt(b['p90']):>8} "
            f"{_fmt(b['p99']):>8} {_fmt(b['max']):>8} {_fmt(b['ratio'], '.2f'):>8}"
        )
    if s["requests"] == 0:
        lines.append(
            f"note: no request started inside the measured window ({s['warmup_requests']} started during "
            "warm-up and were still running at its end): the server is far slower than --duration allows"
        )
    slo = s["slo"]
    verdict = "PASS" if slo["pass"] else "FAIL: " + "; ".join(slo["reasons"])
    lines.append(
        f"SLO (no errors, P99 <= {slo['p99_budget_ms']:g} ms, per-bucket P99/P50 <= "
        f"{slo['bucket_ratio_limit']:g} where n >= {slo['min_samples']}): {verdict}"
    )
    return "\n".join(lines)
