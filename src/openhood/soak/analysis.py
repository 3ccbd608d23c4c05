"""From memory samples to a verdict: growth slope after warm-up, growth mid-run → end, and the
allocation sites and object types that kept growing.

Growth is read from a least-squares line fitted to the samples after the warm-up fraction
(allocator pools, caches filled by the first requests of each shape), not from two raw points,
so one noisy sample cannot pass or fail a soak; ``growth_pct`` is the fitted line's rise from
mid-run to the end over its mid-run value. Sites and types add up the per-call diffs of
``/debug/memory`` after the warm-up (growing and shrinking, so objects merely in flight net out). The trade-off: a line assumes steady growth; a leak that
only starts late shows up diluted (the raw mid → end figure is reported beside it).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from openhood.growth import fit_growth

METRICS = {"rss": "RSS", "uss": "USS", "traced": "tracemalloc"}


def series(samples: list[dict]) -> dict[str, np.ndarray]:
    """Per-sample arrays: t (s), requests, rss/uss/traced (bytes), fds, threads."""

    def col(get):
        return np.array([np.nan if (v := get(s["memory"])) is None else float(v) for s in samples])

    return {
        "t": np.array([s["t"] for s in samples], float),
        "requests": np.array([s["requests"] for s in samples], float),
        "rss": col(lambda m: m["process"]["rss_bytes"]),
        "uss": col(lambda m: m["process"]["uss_bytes"]),
        "traced": col(lambda m: (m.get("tracemalloc") or {}).get("traced_bytes")),
        "fds": col(lambda m: m["process"]["fds"]),
        "threads": col(lambda m: m["process"]["threads"]),
    }


def analyze(samples: list[dict], warmup: float = 0.3, max_growth_pct: float = 2.0, top: int = 15) -> dict:
    s = series(samples)
    t, t_end = s["t"], float(s["t"][-1])
    post = t >= warmup * t_end
    if post.sum() < 3:  # a very short soak: fit what there is after the baseline
        post = t > 0
    t_mid = t_end / 2
    mid_i = int(np.argmin(np.abs(t - t_mid)))
    growth = {}
    for key in METRICS:
        g = fit_growth(t[post], s[key][post], t_mid, t_end)
        if g is not None:
            g["raw_mid"], g["raw_end"] = float(s[key][mid_i]), float(s[key][-1])
            g["raw_growth_pct"] = float((s[key][-1] - s[key][mid_i]) / s[key][mid_i] * 100)
            reqs = s["requests"][post]
            if reqs[-1] > reqs[0]:
                g["bytes_per_request"] = float(
                    (g["fit_end"] - g["fit_mid"]) / max(1.0, s["requests"][-1] - s["requests"][mid_i])
                )
        growth[key] = g
    sites: Counter[str] = Counter()
    types: Counter[str] = Counter()
    # no sample after the baseline (every one missed on an overloaded machine): no diffs to sum,
    # and no fit, so the verdict below is "fail" rather than a crash that loses the report
    first_post = int(np.flatnonzero(post)[0]) if post.any() else len(samples)
    for sample in samples[max(first_post, 1) :]:  # each diff is against the sample before it
        mem = sample["memory"]
        for site in (mem.get("tracemalloc") or {}).get("sites", []):
            sites[site["site"]] += site["size_delta"]
        for row in mem["gc"]["growing_types"] + mem["gc"].get("shrinking_types", []):
            types[row["type"]] += row["count_delta"]
    rss = growth.get("rss")
    verdict = "pass" if rss is not None and (rss["growth_pct"] or 0.0) <= max_growth_pct else "fail"
    return {
        "verdict": verdict,
        "max_growth_pct": max_growth_pct,
        "warmup_fraction": warmup,
        "duration_s": t_end,
        "requests": int(s["requests"][-1]),
        "samples": len(samples),
        "growth": growth,
        "fds": {"start": float(s["fds"][0]), "end": float(s["fds"][-1])},
        "threads": {"start": float(s["threads"][0]), "end": float(s["threads"][-1])},
        "top_sites": [{"site": k, "size_delta": v} for k, v in sites.most_common(top) if v > 0],
        "top_types": [{"type": k, "count_delta": v} for k, v in types.most_common(top) if v > 0],
    }


def format_summary(a: dict) -> str:
    lines = [
        f"soak: {a['verdict'].upper()} — {a['requests']} requests in {a['duration_s']:.0f} s, {a['samples']} samples, "
        f"RSS growth limit {a['max_growth_pct']:g}% (mid-run → end, fitted after {a['warmup_fraction']:.0%} warm-up)"
    ]
    for key, label in METRICS.items():
        g = a["growth"].get(key)
        if g:
            lines.append(
                f"  {label:12s} {g['fit_mid'] / 2**20:8.1f} → {g['fit_end'] / 2**20:8.1f} MB  growth "
                f"{g['growth_pct']:+.2f}% (raw {g['raw_growth_pct']:+.2f}%)  slope {g['slope_per_s'] / 1024:+.1f} KB/s"
            )
    lines.append(
        f"  fds {a['fds']['start']:.0f} → {a['fds']['end']:.0f}, threads {a['threads']['start']:.0f} → {a['threads']['end']:.0f}"
    )
    lines.append("  top growing sites:")
    lines += [f"    {r['size_delta'] / 1024:+10.1f} KB  {r['site']}" for r in a["top_sites"][:8]]
    lines.append("  top growing types:")
    lines += [f"    {r['count_delta']:+8d}  {r['type']}" for r in a["top_types"][:8]]
    return "\n".join(lines)
