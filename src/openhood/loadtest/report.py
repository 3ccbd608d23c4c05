"""The ``--report DIR`` output: index.html with inline-SVG plots, summary.json, requests.csv.

One self-contained HTML file (no scripts, no external assets) that opens offline in any
browser, plus the raw per-request numbers so any plot can be redrawn elsewhere. requests.csv
holds times, status and lengths only: never request text (privacy; a load test of production
samples must not leak them into a report someone mails around).
"""

from __future__ import annotations

import csv
import json
from html import escape
from pathlib import Path

import numpy as np

from openhood.loadtest import svgplot
from openhood.loadtest.stats import tokens_per_text

CSS = """body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}.pass{color:#2a7a2a;font-weight:bold}.fail{color:#b22;font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots svg{border:1px solid #ddd}"""


def _num(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _per_second(result) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Seconds of the measured window, and per-second series for the time plots."""
    cfg = result.config
    t_sched = result.scheduled - cfg.warmup
    t_done = result.done - cfg.warmup
    end = max(cfg.duration, float(t_done.max()) if t_done.size else 0.0)
    edges = np.arange(0.0, np.ceil(end) + 1.0)
    ok = result.ok
    done_ok, _ = np.histogram(t_done[ok], bins=edges)
    done_err, _ = np.histogram(t_done[~ok], bins=edges)
    sched, _ = np.histogram(t_sched, bins=edges)
    lat_ms = result.latency * 1e3
    sec = np.floor(t_sched).astype(int)
    p50 = np.full(edges.size - 1, np.nan)
    p99 = np.full(edges.size - 1, np.nan)
    for s in range(edges.size - 1):
        sel = ok & (sec == s)
        if sel.any():
            p50[s], p99[s] = np.percentile(lat_ms[sel], [50, 99])
    x = edges[:-1] + 0.5
    return x, {"ok": done_ok, "err": done_err, "sched": sched, "p50": p50, "p99": p99}


def plots(result, summary: dict) -> list[str]:
    """The four plots of one run, as SVG strings."""
    ok = result.ok
    lat_ms = result.latency * 1e3
    lat = summary["latency_ms"]
    x, s = _per_second(result)
    tokens, source = tokens_per_text(result)
    budget = summary["slo"]["p99_budget_ms"]
    throughput = [("completed OK / s", x, s["ok"])]
    if s["err"].any():
        throughput.append(("errors / s", x, s["err"]))
    if result.config.mode == "open":
        throughput.append(("offered (scheduled) / s", x, s["sched"]))
    return [
        svgplot.histogram(
            lat_ms[ok],
            title="Latency histogram (successful requests)",
            xlabel="latency (ms)",
            plot_id="plot-latency-histogram",
            markers={"P50": lat["p50"], "P99": lat["p99"]},
        ),
        svgplot.lines(
            [("P50", x, s["p50"]), ("P99", x, s["p99"])],
            title="Latency over time (by scheduled second)",
            xlabel="seconds into the measured window",
            ylabel="latency (ms)",
            plot_id="plot-latency-over-time",
            hline=(f"P99 budget {budget:g} ms", budget),
        ),
        svgplot.scatter(
            tokens,
            lat_ms,
            title="Latency vs input length",
            xlabel=f"tokens per text ({source})",
            ylabel="latency (ms)",
            plot_id="plot-latency-vs-length",
            flags=~ok,
            flag_label="failed",
        ),
        svgplot.lines(
            throughput,
            title="Throughput over time",
            xlabel="seconds into the measured window",
            ylabel="requests / s",
            plot_id="plot-throughput-over-time",
        ),
    ]


def _summary_html(s: dict) -> str:
    slo = s["slo"]
    verdict = (
        '<span class="pass">PASS</span>'
        if slo["pass"]
        else '<span class="fail">FAIL</span>: ' + escape("; ".join(slo["reasons"]))
    )
    lat = s["latency_ms"]
    mode = (
        f"open loop, offered {s['offered_rate']:g} req/s"
        if s["mode"] == "open"
        else f"closed loop, {s['concurrency']} clients"
    )
    rows = [
        ("target", escape(s["url"])),
        ("mode", mode),
        (
            "window",
            f"{s['duration_s']:g} s (+{s['warmup_s']:g} s warm-up), {s['batch']} text(s)/request, seed {s['seed']}",
        ),
        ("client", escape(s["client"])),
        ("requests", f"{s['requests']} ({s['ok']} ok, {s['error_count']} errors {escape(json.dumps(s['errors']))})"),
        ("throughput", f"{s['throughput_rps']:.1f} req/s, {s['texts_per_s']:.1f} texts/s"),
        (
            "latency",
            f"P50 {_num(lat['p50'])} ms, P90 {_num(lat['p90'])} ms, P99 {_num(lat['p99'])} ms, "
            f"max {_num(lat['max'])} ms, P99/P50 {_num(lat['ratio'], '.2f')}",
        ),
        (
            "SLO",
            f"{verdict} (no errors, P99 &le; {slo['p99_budget_ms']:g} ms, P99/P50 &le; "
            f"{slo['bucket_ratio_limit']:g} per bucket with &ge; {slo['min_samples']} samples)",
        ),
    ]
    out = ["<table class='summary'>"] + [f"<tr><th>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    out.append(f"<h2>Per input-length bucket (tokens, {escape(s['length_source'])})</h2>")
    out.append(
        "<table class='buckets'><tr><th>bucket</th><th>n</th><th>P50 ms</th><th>P90 ms</th>"
        "<th>P99 ms</th><th>max ms</th><th>P99/P50</th><th>checked</th></tr>"
    )
    for b in s["buckets"]:
        checked = "yes" if b["bucket"] in slo["buckets_checked"] else "no (n &lt; min)"
        out.append(
            f"<tr><td>{b['bucket']}</td><td>{b['count']}</td><td>{_num(b['p50'])}</td><td>{_num(b['p90'])}</td>"
            f"<td>{_num(b['p99'])}</td><td>{_num(b['max'])}</td><td>{_num(b['ratio'], '.2f')}</td><td>{checked}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _sweep_html(sweep: dict) -> tuple[str, str]:
    runs = sweep["runs"]
    out = [
        "<h2>Rate sweep</h2>",
        f"<p>Highest offered rate meeting the SLO: <b>{_num(sweep['best_rate'], '.1f')} req/s</b> "
        f"(boundary repeats: {sweep['repeat_passes']}/{sweep['repeats_run']} passed).</p>",
        "<table class='sweep'><tr><th>#</th><th>phase</th><th>offered req/s</th><th>seed</th><th>achieved req/s</th>"
        "<th>P50 ms</th><th>P99 ms</th><th>P99/P50</th><th>worst bucket ratio</th><th>errors</th><th>SLO</th></tr>",
    ]
    for i, r in enumerate(runs):
        cls = "pass" if r["pass"] else "fail"
        out.append(
            f"<tr><td>{i + 1}</td><td>{r['phase']}</td><td>{r['rate']:.1f}</td><td>{r['seed']}</td>"
            f"<td>{r['throughput_rps']:.1f}</td><td>{_num(r['p50'])}</td><td>{_num(r['p99'])}</td>"
            f"<td>{_num(r['ratio'], '.2f')}</td><td>{_num(r['worst_bucket_ratio'], '.2f')}</td>"
            f"<td>{r['errors']}</td><td class='{cls}'>{'PASS' if r['pass'] else 'FAIL'}</td></tr>"
        )
    out.append("</table>")
    order = sorted(range(len(runs)), key=lambda i: runs[i]["rate"])
    rates = [runs[i]["rate"] for i in order]
    plot = svgplot.lines(
        [("P99 ms", rates, [runs[i]["p99"] for i in order]), ("P50 ms", rates, [runs[i]["p50"] for i in order])],
        title="Latency vs offered rate (sweep)",
        xlabel="offered rate (req/s)",
        ylabel="latency (ms)",
        plot_id="plot-sweep",
        hline=(f"P99 budget {sweep['p99_budget_ms']:g} ms", sweep["p99_budget_ms"]),
    )
    return "\n".join(out), plot


def render_html(result, summary: dict, sweep: dict | None = None) -> str:
    title = "openhood load test" + (" — rate sweep" if sweep else "")
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    plot_list = []
    if sweep is not None:
        table, sweep_plot = _sweep_html(sweep)
        parts.append(table)
        plot_list.append(sweep_plot)
        parts.append("<h2>Boundary run (highest passing rate, first repeat)</h2>")
    parts.append(_summary_html(summary))
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts.extend(plot_list + plots(result, summary))
    parts.append(
        "</div><p>Raw numbers: <a href='summary.json'>summary.json</a>, "
        "<a href='requests.csv'>requests.csv</a> (times, status, lengths; no text).</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(out_dir: str | Path, result, summary: dict, sweep: dict | None = None) -> Path:
    """Write index.html, summary.json and requests.csv into ``out_dir``; return index.html's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(render_html(result, summary, sweep), encoding="utf-8")
    payload = {"run": summary} if sweep is None else {"sweep": sweep, "run": summary}
    (out / "summary.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    tokens, _ = tokens_per_text(result)
    with (out / "requests.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["scheduled_s", "sent_s", "done_s", "latency_ms", "status", "n_texts", "chars", "tokens_per_text"])
        for i in range(len(result.status)):
            w.writerow(
                [
                    f"{result.scheduled[i]:.6f}",
                    f"{result.sent[i]:.6f}",
                    f"{result.done[i]:.6f}",
                    f"{(result.done[i] - result.scheduled[i]) * 1e3:.3f}",
                    result.status[i],
                    int(result.n_texts[i]),
                    int(result.chars[i]),
                    f"{tokens[i]:.1f}",
                ]
            )
    return index
