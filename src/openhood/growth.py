"""The growth fit of a memory series: a least-squares line, its slope and its rise in percent.

One rule shared by the soak's verdict (``soak.analysis``) and the console's live RSS trend
(``server.console_snapshot``), so both read "growing" the same way. A line through every sample,
not two raw points, so one noisy sample cannot pass or fail a run. The trade-off: a line assumes
steady growth; a leak that only starts late shows up diluted.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def fit_growth(t: np.ndarray, y: np.ndarray, t_mid: float, t_end: float) -> dict[str, Any] | None:
    """Line through (t, y): slope per second and the fitted rise from ``t_mid`` to ``t_end`` in %.

    >>> g = fit_growth(np.array([0., 1., 2., 3.]), np.array([100., 101., 102., 103.]), 1.5, 3.0)
    >>> round(g["slope_per_s"], 6), round(g["growth_pct"], 3)
    (1.0, 1.478)
    """
    ok = np.isfinite(y)
    if ok.sum() < 3:
        return None
    slope, intercept = np.polyfit(t[ok], y[ok], 1)
    at_mid, at_end = intercept + slope * t_mid, intercept + slope * t_end
    return {
        "slope_per_s": float(slope),
        "fit_mid": float(at_mid),
        "fit_end": float(at_end),
        "growth_pct": float((at_end - at_mid) / at_mid * 100) if at_mid > 0 else None,
    }
