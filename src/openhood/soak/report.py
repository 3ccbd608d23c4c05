"""The soak's files: ``soak.json`` (verdict, growth, top sites/types, every sample's totals) and
``index.html`` (inline SVG plots drawn by ``loadtest.svgplot``, tables).

The HTML is one self-contained file so it opens offline from a CI artifact. The trade-off: the
plots are static (no zoom), like the load-test report's.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from openhood.loadtest.svgplot import lines
from openhood.soak.analysis import series


def write_report(out_dir: str | Path, analysis: dict, run, config: dict) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = series(run.samples)
    doc = {
        "analysis": analysis,
        "config": config,
        "models": [m.get("id") for m in run.models],
        "outcomes": dict(run.outcomes),
        "unexpected": run.unexpected,
        "missed_samples": run.missed_samples,
        "stopped_early": run.stopped_early,
        "samples": {k: [None if v != v else v for v in arr.tolist()] for k, arr in s.items()},
    }
    (out / "soak.json").write_text(json.dumps(doc, indent=2))
    mb = 2**20
    plots = [
        lines(
            [("RSS", s["t"], s["rss"] / mb), ("USS", s["t"], s["uss"] / mb)],
            title="Process memory",
            xlabel="seconds",
            ylabel="MB",
            plot_id="rss",
        ),
        lines(
            [("tracemalloc traced", s["t"], s["traced"] / mb)],
            title="Python allocations (tracemalloc)",
            xlabel="seconds",
            ylabel="MB",
            plot_id="traced",
        ),
        lines(
            [("open fds", s["t"], s["fds"]), ("threads", s["t"], s["threads"])],
            title="File descriptors and threads",
            xlabel="seconds",
            ylabel="count",
            plot_id="fds",
        ),
    ]
    rows = "".join(
        f"<tr><td>{r['size_delta'] / 1024:+.1f}</td><td><code>{escape(r['site'])}</code></td></tr>"
        for r in analysis["top_sites"]
    )
    types = "".join(
        f"<tr><td>{r['count_delta']:+d}</td><td><code>{escape(r['type'])}</code></td></tr>"
        for r in analysis["top_types"]
    )
    rss = analysis["growth"].get("rss") or {}
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>openhood soak: {analysis["verdict"]}</title>
<style>body{{font-family:sans-serif;margin:2em}} td{{padding:2px 8px}} .fail{{color:#c00}} .pass{{color:#080}}</style></head>
<body><h1 id="verdict" class="{analysis["verdict"]}">soak {analysis["verdict"].upper()}</h1>
<p>{analysis["requests"]} requests in {analysis["duration_s"]:.0f} s; RSS growth mid-run → end (fitted after
{analysis["warmup_fraction"]:.0%} warm-up): <b>{rss.get("growth_pct", float("nan")):+.2f}%</b>
(limit {analysis["max_growth_pct"]:g}%), slope {rss.get("slope_per_s", float("nan")) / 1024:+.1f} KB/s.</p>
{"".join(plots)}
<h2>Top growing allocation sites (KB after warm-up)</h2><table id="sites">{rows}</table>
<h2>Top growing object types (count after warm-up)</h2><table id="types">{types}</table>
</body></html>"""
    (out / "index.html").write_text(html, encoding="utf-8")
    return out / "index.html"
