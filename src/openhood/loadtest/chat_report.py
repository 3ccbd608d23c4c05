"""The ``--report DIR`` output of a chat load test: index.html, summary.json, requests.csv.

Same rules as the embeddings report (``report.py``): one self-contained page with inline SVG
(``svgplot``), no scripts, and raw per-request numbers beside it, never prompt or output text.
Plots: aggregate output tokens/s, TTFT and inter-token P50/P99 against concurrency (how the
server scales), TTFT and inter-token histograms at the highest level (the shape of the tail), and
output tokens/s second by second at every level (a dip is a stall every stream felt).
"""

from __future__ import annotations

import csv
import json
from html import escape
from pathlib import Path

import numpy as np

from openhood.loadtest import svgplot
from openhood.loadtest.chat_stats import inter_token_ms, ttft_ms
from openhood.loadtest.report import CSS

PLOT_IDS = (
    "plot-chat-throughput",
    "plot-chat-ttft",
    "plot-chat-inter-token",
    "plot-chat-ttft-histogram",
    "plot-chat-inter-token-histogram",
    "plot-chat-tokens-over-time",
)


def _num(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def _tokens_per_second(level) -> tuple[np.ndarray, np.ndarray]:
    """x (centre of each second of the measured window) and the tokens that arrived in it."""
    edges = np.arange(0.0, np.ceil(level.duration) + 1.0)
    counts = np.zeros(edges.size - 1)
    for s in level.samples:
        if s.token_times.size:
            weight = max(1.0, s.output_tokens / s.token_times.size)
            counts += weight * np.histogram(s.token_times - level.warmup, bins=edges)[0]
    return edges[:-1] + 0.5, counts


def plots(result, summary: dict) -> list[str]:
    levels = summary["levels"]
    conc = [lv["concurrency"] for lv in levels]

    def series(key: str):
        return [(q.upper(), conc, [_nan(lv[key][q]) for lv in levels]) for q in ("p50", "p99")]

    top = result.levels[int(np.argmax(conc))] if levels else None
    top_sum = levels[int(np.argmax(conc))] if levels else None
    out = [
        svgplot.lines(
            [("output tokens/s", conc, [lv["output_tokens_per_s"] for lv in levels])],
            title="Aggregate output tokens/s vs concurrent streams",
            xlabel="concurrent streams",
            ylabel="tokens / s",
            plot_id=PLOT_IDS[0],
        ),
        svgplot.lines(
            series("ttft_ms"),
            title="Time to first token vs concurrent streams",
            xlabel="concurrent streams",
            ylabel="TTFT (ms)",
            plot_id=PLOT_IDS[1],
        ),
        svgplot.lines(
            series("inter_token_ms"),
            title="Inter-token gap vs concurrent streams",
            xlabel="concurrent streams",
            ylabel="gap between tokens (ms)",
            plot_id=PLOT_IDS[2],
        ),
    ]
    label = f" at {top.concurrency} streams" if top else ""
    ttft = ttft_ms(top.measured) if top else np.zeros(0)
    gaps = inter_token_ms(top.measured) if top else np.zeros(0)
    marks = (lambda k: {"P50": top_sum[k]["p50"], "P99": top_sum[k]["p99"]}) if top_sum else (lambda k: None)
    out.append(
        svgplot.histogram(
            ttft, title="TTFT histogram" + label, xlabel="TTFT (ms)", plot_id=PLOT_IDS[3], markers=marks("ttft_ms")
        )
    )
    out.append(
        svgplot.histogram(
            gaps,
            title="Inter-token gap histogram" + label,
            xlabel="gap (ms)",
            plot_id=PLOT_IDS[4],
            markers=marks("inter_token_ms"),
        )
    )
    over_time = [(f"{lv.concurrency} streams", *_tokens_per_second(lv)) for lv in result.levels]
    out.append(
        svgplot.lines(
            over_time,
            title="Output tokens per second over time, per level",
            xlabel="seconds into the measured window",
            ylabel="tokens / s",
            plot_id=PLOT_IDS[5],
        )
    )
    return out


def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def _summary_html(s: dict) -> str:
    w = s["workload"]
    rows = [
        ("target", escape(s["url"])),
        (
            "load",
            f"closed loop, {s['duration_s']:g} s per level (+{s['warmup_s']:g} s warm-up), seed {s['seed']}, "
            f"temperature {s['temperature']:g}",
        ),
        ("prompt lengths", escape(w["prompt_tokens"])),
        ("output lengths (max_tokens)", escape(w["output_tokens"])),
        ("client", escape(s["client"])),
    ]
    out = ["<table class='summary'>"] + [f"<tr><th>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in rows]
    out.append("</table><h2>Per concurrency level (times in ms)</h2>")
    out.append(
        "<table class='levels'><tr><th>streams</th><th>requests</th><th>errors</th><th>output tokens/s</th>"
        "<th>unfinished at drain</th><th>TTFT P50</th><th>TTFT P99</th><th>inter-token P50</th><th>inter-token P99</th><th>P99/P50</th>"
        "<th>output tokens / request</th><th>prompt tokens / request</th><th>finish reasons</th></tr>"
    )
    for lv in s["levels"]:
        t, g = lv["ttft_ms"], lv["inter_token_ms"]
        errs = f"{lv['error_count']} {escape(json.dumps(lv['errors']))}" if lv["errors"] else "0"
        out.append(
            f"<tr><td>{lv['concurrency']}</td><td>{lv['requests']}</td><td>{errs}</td>"
            f"<td>{lv['output_tokens_per_s']:.1f}</td><td>{lv['unfinished']}</td><td>{_num(t['p50'])}</td><td>{_num(t['p99'])}</td>"
            f"<td>{_num(g['p50'])}</td><td>{_num(g['p99'])}</td><td>{_num(g['ratio'], '.2f')}</td>"
            f"<td>{_num(lv['output_tokens_mean'])}</td><td>{_num(lv['prompt_tokens_mean'])}</td>"
            f"<td>{escape(json.dumps(lv['finish_reasons']))}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def render_html(result, summary: dict) -> str:
    title = "openhood load test — chat streaming"
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _summary_html(summary),
        "<h2>Plots</h2><div class='plots'>",
        *plots(result, summary),
        "</div><p>Raw numbers: <a href='summary.json'>summary.json</a>, "
        "<a href='requests.csv'>requests.csv</a> (times, status, lengths; no text).</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_chat_report(out_dir: str | Path, result, summary: dict) -> Path:
    """Write index.html, summary.json and requests.csv into ``out_dir``; return index.html's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(render_html(result, summary), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps({"run": summary}, indent=2), encoding="utf-8")
    with (out / "requests.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "concurrency",
                "start_s",
                "done_s",
                "measured",
                "status",
                "finish_reason",
                "ttft_ms",
                "mean_inter_token_ms",
                "prompt_words",
                "prompt_tokens",
                "max_tokens",
                "output_tokens",
            ]
        )
        for lv in result.levels:
            for s in lv.samples:
                k = s.token_times.size
                itl = (s.token_times[-1] - s.token_times[0]) / (k - 1) * 1e3 if k > 1 else float("nan")
                w.writerow(
                    [
                        lv.concurrency,
                        f"{s.start:.6f}",
                        f"{s.done:.6f}",
                        int(s.start >= lv.warmup),
                        s.status,
                        s.finish_reason or "",
                        f"{s.ttft * 1e3:.3f}",
                        f"{itl:.3f}",
                        s.prompt_words,
                        s.prompt_tokens,
                        s.max_tokens,
                        s.output_tokens,
                    ]
                )
    return index
