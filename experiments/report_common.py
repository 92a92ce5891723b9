"""What several report scripts share: the 95% band of a set of curves, the short interval format of the
AFBO tables, a study's curves read from its rounds.parquet, the zero-order hold on a run's records and the
split named by a setting.

Imported by the scripts beside it as ``from report_common import ...`` (a script run as
``python experiments/NAME.py`` has its own folder on the import path). The statistics are zofl.stats's.
"""
from __future__ import annotations

import math

import numpy as np

from zofl.packed import read_table
from zofl.stats import interval, t_quantile

# afbo_plot.py's names of the two methods' lines, and the suffix of their outer-lr = 0 controls' lines
AFBO, FEDNEST = "AFBO (async)", "FedNest (sync)"
CONTROL = ", x fixed (outer-lr=0: control)"


def band(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 95% t half-width per column (the seeds are the rows); half-width 0 for one row."""
    n = len(mat)
    mean = mat.mean(axis=0)
    if n < 2:
        return mean, np.zeros_like(mean)
    return mean, t_quantile(n) * mat.std(axis=0, ddof=1) / np.sqrt(n)


def iv(values) -> list:
    """[mean, half-width of the 95% t interval, n] of ``values`` for a JSON file, None where a figure is not defined
    (n < 2 has no interval; no value has no mean)."""
    return json_interval(interval(values))


def json_interval(t: tuple[float, float, int]) -> list:
    """A zofl.stats.interval for a JSON file: [mean, half-width, n], None where a figure is not defined (NaN)."""
    m, h, n = t
    return [None if math.isnan(m) else m, None if math.isnan(h) else h, n]


def pm(t: tuple[float, float, int], scale: float = 100.0, digits: int = 1) -> str:
    """A zofl.stats.interval as the AFBO tables print it: "mean +- half" (no n), "mean (n=N)" when there is no
    half-width, "-" when there are no values."""
    mean, half, n = t
    if n == 0 or math.isnan(mean):
        return "-"
    if math.isnan(half):
        return f"{scale * mean:.{digits}f} (n={n})"
    return f"{scale * mean:.{digits}f} +- {scale * half:.{digits}f}"


def upper_curve(recs: list[dict], metric: str) -> list[float]:
    """A FedRZO_bl run's metric at round 0 and after each upper round (what Fig. 2 plots per upper round)."""
    return [recs[0][metric]] + [r[metric] for r in recs if r.get("level") == "upper"]


def short(t: tuple[float, float, int], digits: int = 2) -> str:
    """A zofl.stats.interval as docs/results/README.md's one-screen tables print it: "mean +- half" (no n),
    the mean alone for one value, "" for none."""
    mean, half, n = t
    return "" if not n else f"{mean:.{digits}f}" if n == 1 else f"{mean:.{digits}f} +- {half:.{digits}f}"


def curves(path, metric: str = "test_loss", scale: float = 1.0, group=lambda setting: setting) -> dict:
    """group(setting) -> method -> seed -> [(clock_s, scale x metric), ...] in record order, from the per-round
    records of afbo_plot.py --records (rounds.parquet); records without the metric (not evaluated) are left out."""
    out: dict = {}
    for r in read_table(path):
        if r[metric] is None:
            continue
        by_seed = out.setdefault(group(r["setting"]), {}).setdefault(r["method"], {})
        by_seed.setdefault(r["seed"], []).append((r["clock_s"] or 0.0, scale * r[metric]))
    return out


def hold(recs: list[tuple[float, float]], t: float) -> float:
    """The value of the last record (clock_s, value) with clock_s <= t (zero-order hold; the first record's
    value before it), as the AFBO figures read a curve."""
    return next(v for c, v in reversed(recs) if c <= t) if recs[0][0] <= t else recs[0][1]


def split_of(setting: str) -> str:
    """The split of an AFBO setting name (afbo_plot.py's setting_of) in words."""
    return "IID (alpha=1000)" if "iid" in setting.split("_") else "non-IID (Dirichlet alpha=0.5)"
