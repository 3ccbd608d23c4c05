"""Tiny inline-SVG charts (histogram, scatter, lines) for the HTML report: no plotting dependency.

A report must open anywhere, offline, and not pull matplotlib (~40 MB) into a serving stack for
four charts. SVG written by hand is a few dozen lines: a linear axis with "nice" ticks, shapes in
data coordinates, text escaped. The trade-off: no zoom, no log axes, and scatter plots are
down-sampled (seeded, evenly) to ``MAX_POINTS`` so the page stays small for long runs.

    >>> nice_ticks(0, 97)[:3]
    [0.0, 20.0, 40.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np
from numpy.typing import ArrayLike

W, H = 640, 320
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 34, 46
MAX_POINTS = 4000
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """About ``target`` round tick values covering [lo, hi] (steps of 1, 2, 5 × 10^k)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return [float(x) for x in ticks]


class _Axes:
    def __init__(self, x_lo, x_hi, y_lo, y_hi):
        self.xt = nice_ticks(x_lo, x_hi)
        self.yt = nice_ticks(y_lo, y_hi)
        self.x0, self.x1 = self.xt[0], self.xt[-1]
        self.y0, self.y1 = self.yt[0], self.yt[-1]

    def px(self, x):
        return PAD_L + (np.asarray(x, dtype=float) - self.x0) / (self.x1 - self.x0) * (W - PAD_L - PAD_R)

    def py(self, y):
        return H - PAD_B - (np.asarray(y, dtype=float) - self.y0) / (self.y1 - self.y0) * (H - PAD_T - PAD_B)


def _fmt_tick(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.1e}"


def _frame(ax: _Axes, title: str, xlabel: str, ylabel: str, plot_id: str, body: list[str]) -> str:
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(plot_id)}" class="plot" '
        f'width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14" font-family="sans-serif">{escape(title)}</text>',
    ]
    for t in ax.yt:
        y = float(ax.py(t))
        out.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(
            f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'font-family="sans-serif">{_fmt_tick(t)}</text>'
        )
    for t in ax.xt:
        x = float(ax.px(t))
        out.append(f'<line x1="{x:.1f}" y1="{H - PAD_B}" x2="{x:.1f}" y2="{H - PAD_B + 4}" stroke="#333"/>')
        out.append(
            f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle" font-size="11" '
            f'font-family="sans-serif">{_fmt_tick(t)}</text>'
        )
    out.extend(body)
    out.append(f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="#333"/>')
    out.append(f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#333"/>')
    out.append(
        f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 8}" text-anchor="middle" font-size="12" '
        f'font-family="sans-serif">{escape(xlabel)}</text>'
    )
    out.append(
        f'<text x="14" y="{(PAD_T + H - PAD_B) / 2}" text-anchor="middle" font-size="12" '
        f'font-family="sans-serif" transform="rotate(-90 14 {(PAD_T + H - PAD_B) / 2})">{escape(ylabel)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _empty(title: str, plot_id: str) -> str:
    ax = _Axes(0, 1, 0, 1)
    body = [f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="13" fill="#888">no data</text>']
    return _frame(ax, title, "", "", plot_id, body)


def histogram(
    values, *, title: str, xlabel: str, plot_id: str, bins: int = 40, markers: dict[str, float] | None = None
) -> str:
    """Bars of counts; ``markers`` draws labelled vertical lines (e.g. P50, P99)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return _empty(title, plot_id)
    counts, edges = np.histogram(v, bins=bins)
    ax = _Axes(float(edges[0]), float(edges[-1]), 0.0, float(counts.max()))
    body = []
    y_base = float(ax.py(0))
    for c, a, b in zip(counts, edges[:-1], edges[1:], strict=True):
        if c == 0:
            continue
        x0, x1, y = float(ax.px(a)), float(ax.px(b)), float(ax.py(c))
        body.append(
            f'<rect class="bar" x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" '
            f'height="{y_base - y:.1f}" fill="{COLORS[0]}"/>'
        )
    for i, (label, x) in enumerate((markers or {}).items()):
        if x is None or not math.isfinite(x):
            continue
        px = float(ax.px(min(max(x, ax.x0), ax.x1)))
        color = COLORS[1 + i % (len(COLORS) - 1)]
        body.append(
            f'<line x1="{px:.1f}" y1="{PAD_T}" x2="{px:.1f}" y2="{H - PAD_B}" stroke="{color}" stroke-dasharray="4 3"/>'
        )
        body.append(
            f'<text x="{px + 3:.1f}" y="{PAD_T + 12 + 13 * i}" font-size="11" fill="{color}" '
            f'font-family="sans-serif">{escape(label)}</text>'
        )
    return _frame(ax, title, xlabel, "requests", plot_id, body)


def _thin(n: int, seed: int = 0) -> np.ndarray:
    if n <= MAX_POINTS:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=MAX_POINTS, replace=False))


def scatter(
    xs, ys, *, title: str, xlabel: str, ylabel: str, plot_id: str, flags=None, flag_label: str = "error"
) -> str:
    """Points; ``flags`` (bool per point) draws those in red (e.g. failed requests)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    f = np.zeros(x.size, bool) if flags is None else np.asarray(flags, dtype=bool)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, f = x[keep], y[keep], f[keep]
    if x.size == 0:
        return _empty(title, plot_id)
    ax = _Axes(float(x.min()), float(x.max()), 0.0, float(y.max()))
    idx = _thin(x.size)
    px, py = ax.px(x[idx]), ax.py(y[idx])
    body = []
    for a, b, bad in zip(px, py, f[idx], strict=True):
        color = COLORS[1] if bad else COLORS[0]
        body.append(f'<circle class="pt" cx="{a:.1f}" cy="{b:.1f}" r="1.6" fill="{color}" fill-opacity="0.5"/>')
    if f.any():
        body.append(
            f'<text x="{W - PAD_R - 4}" y="{PAD_T + 12}" text-anchor="end" font-size="11" '
            f'fill="{COLORS[1]}" font-family="sans-serif">red: {escape(flag_label)}</text>'
        )
    return _frame(ax, title, xlabel, ylabel, plot_id, body)


def lines(
    series: Sequence[tuple[str, ArrayLike, ArrayLike]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    plot_id: str,
    hline: tuple[str, float] | None = None,
) -> str:
    """Polylines with a legend; ``hline`` draws a labelled horizontal reference (e.g. a budget)."""
    data = [(name, np.asarray(xs, float), np.asarray(ys, float)) for name, xs, ys in series]
    data = [(n, x[np.isfinite(y)], y[np.isfinite(y)]) for n, x, y in data]
    data = [d for d in data if d[1].size]
    if not data:
        return _empty(title, plot_id)
    x_lo = min(float(d[1].min()) for d in data)
    x_hi = max(float(d[1].max()) for d in data)
    y_hi = max(float(d[2].max()) for d in data)
    if hline is not None:
        y_hi = max(y_hi, hline[1])
    ax = _Axes(x_lo, x_hi, 0.0, y_hi)
    body = []
    for i, (name, x, y) in enumerate(data):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(ax.px(x), ax.py(y), strict=True))
        body.append(f'<polyline class="series" points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        if x.size <= 40:
            body.extend(
                f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>'
                for a, b in zip(ax.px(x), ax.py(y), strict=True)
            )
        body.append(
            f'<text x="{PAD_L + 8}" y="{PAD_T + 12 + 13 * i}" font-size="11" fill="{color}" '
            f'font-family="sans-serif">{escape(name)}</text>'
        )
    if hline is not None:
        y_ref = float(ax.py(hline[1]))
        body.append(
            f'<line x1="{PAD_L}" y1="{y_ref:.1f}" x2="{W - PAD_R}" y2="{y_ref:.1f}" stroke="#888" '
            f'stroke-dasharray="6 4"/>'
        )
        body.append(
            f'<text x="{W - PAD_R - 4}" y="{y_ref - 4:.1f}" text-anchor="end" font-size="11" fill="#666" '
            f'font-family="sans-serif">{escape(hline[0])}</text>'
        )
    return _frame(ax, title, xlabel, ylabel, plot_id, body)
