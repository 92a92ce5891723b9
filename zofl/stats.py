"""Statistics of the runner's reports: per-run figures and intervals over seeds (pure functions).

* ``run_figures(records)``: one run's final value, best value and the mean over the last 10% of its
  rounds (a final-round snapshot of a curve that swings by points decides nothing on its own).
* ``interval(values)``: mean, the half-width of the 95% Student-t interval and n, over seeds
  (t_{0.975, n-1} s / sqrt(n), s with ddof 1); n = 1 gives no interval (nan).
* ``paired(a, b)``: the same for the differences a_s - b_s over the seeds s both have: the
  comparison of two settings on the same seeds (same splits, same directions), whose interval is
  much tighter than that of two unpaired means when the seeds' own spread is large.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

LAST_FRACTION = 0.1


def run_figures(values: list[float], last_fraction: float = LAST_FRACTION) -> dict[str, float]:
    """final, best and last-10% mean of one run's per-round values (round 0 included in best)."""
    v = np.asarray([x for x in values], dtype=float)
    if not len(v):
        return {"final": math.nan, "best": math.nan, "last10": math.nan}
    k = max(1, int(math.ceil(last_fraction * (len(v) - 1)))) if len(v) > 1 else 1
    return {"final": float(v[-1]), "best": float(np.nanmax(v)), "last10": float(np.nanmean(v[-k:]))}


def t_quantile(n: int) -> float:
    """t_{0.975, n-1}."""
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def interval(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, half-width of the 95% t interval, n); the half-width is nan for n < 2."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(v[0]), math.nan, 1
    return float(v.mean()), t_quantile(n) * float(v.std(ddof=1)) / math.sqrt(n), n


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[float, float, int]:
    """interval() of a[s] - b[s] over the seeds s in both."""
    return interval(a[s] - b[s] for s in sorted(set(a) & set(b)))


def fmt_interval(t: tuple[float, float, int], scale: float = 1.0, digits: int = 2) -> str:
    mean, half, n = t
    if n == 0:
        return ""
    if math.isnan(half):
        return f"{scale * mean:.{digits}f} (n=1)"
    return f"{scale * mean:.{digits}f} +- {scale * half:.{digits}f} (n={n})"


def excludes_zero(t: tuple[float, float, int]) -> bool:
    """Whether the interval lies on one side of 0 (an effect at this n; otherwise below the noise)."""
    mean, half, n = t
    return n >= 2 and not math.isnan(half) and abs(mean) > half
