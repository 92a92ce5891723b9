"""AFBO against FedNest (and the other bilevel methods) at equal budgets, every run counted (issue 50).

    python experiments/afbo_verdict.py RUNS_DIR [RUNS_DIR ...] --out docs/results/afbo_verdict/iid
    python experiments/afbo_verdict.py --from docs/results/afbo_verdict/iid     # recompute from the committed files

The first form packs every finished cell of the compare folders (``python -m zofl.compare ... --out RUNS_DIR``)
into OUT/rounds.parquet (every record of every run, long format: experiments/afbo_plot.py's records) and
OUT/runs.csv (one row per run: its cell, seed, status, final clock and accuracy, diverged or not), then writes
OUT/verdict.json, OUT/verdict.md and OUT/fig_verdict_<setting>.png; the second recomputes those from the two
files alone. A study folder of experiments/afbo_plot.py (its rounds.parquet, no runs.csv) is read the same way
with ``--from``: runs.csv is then derived from the records (a run with fewer rounds than its method's others
stopped early: the runs of a method share num-rounds by design).

Readings, per setting (a task, split, stragglers and communication cost; one figure and table each):
- Runs: every run is in the table. Diverged = stopped early (a failed round: replies not finite or beyond
  reply-max-abs), a non-finite test loss, or a final test accuracy below 0.5 (``--diverged-below``); the count
  per method is printed and a diverged run's numbers stay in the means (its accuracy as recorded, held at its
  last record). Where a diverged run's test loss first leaves its path (``onset``: above twice the lowest before
  it, or not finite; or the log-coefficients' spread up by more than 1 in one record) is listed with the record
  before it and the last upper-level step that widened the spread; a diverged run with no onset in its records
  (e.g. stopped by a failed round whose replies were refused before any evaluation saw them) is listed as such.
  Where a run diverged, the paired accuracy gaps at T are also given over the seeds where neither run of the pair
  diverged (``acc_at_T_stable``): read after the runs, so not the pre-registered reading, but what the methods
  do when they do not diverge.
- T: the equal budget, the smallest final simulated clock over the runs that did not stop early (the grids
  give every method the same clock by design). Each curve is read at T by zero-order hold.
- Stopped rising: a method's curve has stopped rising by T when the 95% t interval of acc(T) - acc(3T/4) over
  its seeds has an upper end below 0.1 points (``RISE_TOL``); "rising" when its lower end is above 0, otherwise
  "undecided" (the seeds' noise is too large to tell). The grids' pre-registered rule; at n = 5 its bound is
  about the seeds' spread, so beside it the slope rule (fixed on 2026-11-30, after these grids' readings and
  before experiments/afbo_verdict_ceiling.toml's runs): per run the least-squares slope of test accuracy against
  simulated time over its records in [T/2, T] times T/4 (``quarter_gain``: the gain per quarter that the second
  half's trend gives, read from every record instead of two), the same interval and bounds (``curve_of``).
- Targets (``--target``, default 89.5% test accuracy, above the noise-label controls; ``--auc-target`` 0.9):
  the first simulated time each run reaches them within T; a seed that does not reach one is counted, not
  averaged; the paired ratio of times uses the seeds where both reached.
- Paired by seed (same seed: same split, corruption and draws): A - B at T in accuracy, test loss and weight
  AUC; at each run's own end (the final level: a method's ceiling against the other's); the same gap between
  the two methods' outer-lr = 0 controls (the lower levels and engines alone); the 2 x 2 design's interaction
  (engine x upper level on / off): (A - A's control) - (B - B's control), which earlier pages call "the bilevel
  part"; 0 when the engine's and the upper level's effects add, so an interval that excludes 0 says the gap has
  no split into the two; each method minus its own control.
Numbers are mean +- half-width of the 95% t interval (n - 1 degrees of freedom), n seeds.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from afbo_plot import failed, first_reach, hold, method_of, read_cells, setting_of, varying_step_keys, write_records
from report_common import band, iv  # modules beside this script

RISE_TOL = 0.001  # 0.1 points of accuracy: the largest gain over the last quarter that counts as flat
ONSET_RATIO = 2.0  # a diverged run's onset: its test loss above twice the lowest before it (or not finite),
SPREAD_JUMP = 1.0  # or the log-coefficients' spread (std of x) up by more than 1 in one record
FIELDS = ("setting", "method", "strategy", "control", "cell", "seed", "status", "diverged", "final_clock_s",
          "final_acc", "final_loss", "records")
PAIRS = (("afbo", "fednest"), ("afbo-global", "afbo"), ("afbo-global", "fednest"), ("afbo", "adbo"),
         ("fednest", "adbo"), ("afbo", "sdbo"), ("fednest", "sdbo"))


# -- packing the compare folders ---------------------------------------------------------------------------------
def pack(dirs: list[Path], out: Path, below: float) -> None:
    """OUT/rounds.parquet and OUT/runs.csv from the finished cells of ``dirs``."""
    cells = read_cells(dirs)
    if not cells:
        raise SystemExit(f"no finished cell under {', '.join(map(str, dirs))}")
    vary = varying_step_keys(cells)
    out.mkdir(parents=True, exist_ok=True)
    write_records(cells, vary, out)
    rows = [run_row(setting_of(c["cfg"]), method_of(c["cfg"], vary), c["cfg"]["strategy"],
                    float(c["cfg"].get("outer-lr", 1.0)), Path(c["dir"]).name, c["cfg"]["seed"], failed(c),
                    c["clock"], c["acc"], c["loss"], below) for c in cells]
    write_runs(out, rows)


def run_row(setting: str, method: str, strategy: str, outer_lr: float, cell: str, seed: int, stopped: bool,
            clock: np.ndarray, acc: np.ndarray, loss: np.ndarray, below: float) -> dict:
    """One run's row of runs.csv (FIELDS) from its records: diverged = stopped early, a non-finite test loss after
    x_0's, or a final test accuracy below ``below``."""
    diverged = stopped or not np.all(np.isfinite(loss[1:])) or float(acc[-1]) < below
    return {"setting": setting, "method": method, "strategy": strategy, "control": int(outer_lr == 0.0),
            "cell": cell, "seed": int(seed), "status": "stopped early" if stopped else "ok", "diverged": int(diverged),
            "final_clock_s": f"{float(clock[-1]):.6g}", "final_acc": f"{float(acc[-1]):.6g}",
            "final_loss": f"{float(loss[-1]):.6g}", "records": len(acc)}


def write_runs(out: Path, rows: list[dict]) -> None:
    rows.sort(key=lambda r: (r["setting"], r["strategy"], r["control"], r["seed"], r["cell"]))
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def runs_from_records(out: Path, below: float) -> None:
    """OUT/runs.csv from OUT/rounds.parquet alone (a study packed by experiments/afbo_plot.py --records)."""
    import pandas as pd

    recs = pd.read_parquet(out / "rounds.parquet")
    planned = recs.groupby(["setting", "method"])["round"].max()  # a method's runs share num-rounds by design
    rows = []
    for cell, g in recs.groupby("cell", sort=True):
        g = g.sort_values("round")
        last = g.iloc[-1]
        early = int(last["round"]) < int(planned[(last["setting"], last["method"])])
        rows.append(run_row(last["setting"], last["method"], last["strategy"], float(last["outer_lr"]), cell,
                            last["seed"], early, g["clock_s"].to_numpy(float), g["test_acc"].to_numpy(float),
                            g["test_loss"].to_numpy(float), below))
    write_runs(out, rows)


# -- reading -----------------------------------------------------------------------------------------------------
def load(out: Path, below: float) -> tuple[list[dict], dict[str, dict]]:
    """(the runs of runs.csv, each with its curves: clock, acc, loss, auc as arrays; cell -> run)."""
    import pandas as pd

    if not (out / "runs.csv").exists():
        runs_from_records(out, below)
    runs = list(csv.DictReader(open(out / "runs.csv")))
    recs = pd.read_parquet(out / "rounds.parquet")
    by_cell = {cell: g.sort_values("round") for cell, g in recs.groupby("cell", sort=False)}
    for r in runs:
        g = by_cell[r["cell"]]
        r["seed"], r["control"], r["diverged"] = int(r["seed"]), int(r["control"]), int(r["diverged"])
        r["clock"] = g["clock_s"].to_numpy(float)
        r["acc"] = g["test_acc"].to_numpy(float)
        r["loss"] = g["test_loss"].to_numpy(float)
        r["auc"] = g["weight_auc"].to_numpy(float) if "weight_auc" in g else np.full(len(g), np.nan)
        r["spread"] = g["spread_log_coef"].to_numpy(float) if "spread_log_coef" in g else np.full(len(g), np.nan)
        r["key"] = r["strategy"] + (":control" if r["control"] else "")
    return runs, {r["cell"]: r for r in runs}


def at(r: dict, what: str, t: float) -> float:
    """``what`` of the newest record at simulated time t (afbo_plot.hold: zero-order hold, ties the last record)."""
    return float(hold(r["clock"], r[what], np.array([t]))[0])


# -- the readings ------------------------------------------------------------------------------------------------
def onset(r: dict) -> dict | None:
    """Where a run first leaves its path (None when it does not): the first record after x_0's whose test loss is
    not finite or above ``ONSET_RATIO`` x the lowest before it, or (regularization) whose log-coefficients' spread
    (std of x) rose by more than ``SPREAD_JUMP`` in one record or is not finite. With the record before it: their
    simulated times, test accuracies, losses and spreads; and the last record before the onset that widened the
    spread (an upper-level step), with the spread before and after it."""
    loss, spread = r["loss"], r["spread"]
    has_x = bool(np.any(np.isfinite(spread)))
    for i in range(2, len(loss)):
        bad_loss = not math.isfinite(loss[i]) or loss[i] > ONSET_RATIO * np.nanmin(loss[1:i])
        bad_x = has_x and (not math.isfinite(spread[i]) or spread[i] - spread[i - 1] > SPREAD_JUMP)
        if bad_loss or bad_x:
            o = {"seed": r["seed"], "record": i, "clock_s": float(r["clock"][i]), "acc_before": float(r["acc"][i - 1]),
                 "loss_before": float(loss[i - 1]), "loss_at": float(loss[i]), "loss_end": float(loss[-1]),
                 "spread_before": _or_none(spread[i - 1]), "spread_at": _or_none(spread[i]),
                 "spread_end": _or_none(spread[-1]), "widened": None}
            wide = [j for j in range(1, i) if spread[j] > spread[j - 1]] if has_x else []
            if wide:
                j = wide[-1]
                o["widened"] = {"clock_s": float(r["clock"][j]), "from": float(spread[j - 1]), "to": float(spread[j])}
            return o
    return None


def quarter_gain(clock: np.ndarray, acc: np.ndarray, T: float | None = None) -> float:
    """The least-squares slope of ``acc`` against ``clock`` over the records with clock in [T/2, T] (T: the last
    clock unless given), times T/4: the gain per quarter of the budget that the second half's trend gives."""
    T = float(clock[-1]) if T is None else T
    half = (clock >= T / 2) & (clock <= T)
    if half.sum() < 2 or np.ptp(clock[half]) == 0:
        return float("nan")
    return float(np.polyfit(clock[half], acc[half], 1)[0] * T / 4)


def level(clock: np.ndarray, values: np.ndarray) -> float:
    """The mean of ``values`` over the records with clock in [3T/4, T] (T the last clock): a run's level."""
    return float(np.mean(values[clock >= 0.75 * float(clock[-1])]))


def curve_of(gain: list) -> str:
    """The slope rule's answer from the interval of the gain per quarter: "stopped" when it lies below
    ``RISE_TOL``, "rising" when above 0, "undecided" otherwise."""
    mean, half = gain[0], gain[1]
    if mean is None or half is None:
        return "undecided"
    return "stopped" if mean + half < RISE_TOL else "rising" if mean - half > 0 else "undecided"


def _or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def setting_summary(runs: list[dict], target: float, auc_target: float) -> dict:
    T = min(float(r["clock"][-1]) for r in runs if r["status"] == "ok")
    methods: dict[str, dict] = {}
    by_key: dict[str, dict[int, dict]] = {}
    for r in sorted(runs, key=lambda r: (r["key"], r["seed"])):
        if r["seed"] in by_key.setdefault(r["key"], {}):  # e.g. a tuning folder: several settings of one method
            raise SystemExit(f"{r['setting']}: two runs of {r['key']} with seed {r['seed']} ({r['cell']}, "
                             f"{by_key[r['key']][r['seed']]['cell']}): one run per method and seed is read")
        by_key[r["key"]][r["seed"]] = r
    for key, seeds in by_key.items():
        rs = list(seeds.values())
        times = [first_reach(r, target, T, "acc") for r in rs]
        auc_times = [first_reach(r, auc_target, T, "auc") for r in rs]
        rise = iv([at(r, "acc", T) - at(r, "acc", 0.75 * T) for r in rs])
        slope = iv([quarter_gain(r["clock"], r["acc"], T) for r in rs])
        methods[key] = {
            "label": rs[0]["method"], "seeds": sorted(seeds), "n": len(rs),
            "diverged": sum(r["diverged"] for r in rs),
            "diverged_seeds": [r["seed"] for r in rs if r["diverged"]],
            "onsets": [onset(r) or {"seed": r["seed"], "record": None, "clock_s": float(r["clock"][-1])}
                       for r in rs if r["diverged"]],  # record None: no onset in its records (clock_s: its end)
            "acc_at_T": iv([at(r, "acc", T) for r in rs]),
            "loss_at_T": iv([at(r, "loss", T) for r in rs if math.isfinite(at(r, "loss", T))]),
            "auc_at_T": iv([at(r, "auc", T) for r in rs if math.isfinite(at(r, "auc", T))]),
            "final_acc": iv([float(r["acc"][-1]) for r in rs]),
            "final_clock_s": iv([float(r["clock"][-1]) for r in rs]),
            "rise_last_quarter": rise,
            "stopped_rising": bool(rise[1] is not None and rise[0] + rise[1] < RISE_TOL),
            "rising": bool(rise[1] is not None and rise[0] - rise[1] > 0),
            "quarter_gain": slope, "curve_by_slope": curve_of(slope),
            "reached_target": sum(math.isfinite(t) for t in times),
            "time_to_target": iv([t for t in times if math.isfinite(t)]),
            "reached_auc_target": sum(math.isfinite(t) for t in auc_times),
            "time_to_auc_target": iv([t for t in auc_times if math.isfinite(t)]),
        }
    paired: dict[str, dict] = {}

    def diff(a: str, b: str, fn, stable: bool = False) -> list:
        """A - B paired by seed; ``stable``: only the seeds where neither run diverged."""
        common = sorted(set(by_key.get(a, {})) & set(by_key.get(b, {})))
        if stable:
            common = [s for s in common if not by_key[a][s]["diverged"] and not by_key[b][s]["diverged"]]
        vals = [fn(by_key[a][s]) - fn(by_key[b][s]) for s in common]
        return iv([v for v in vals if math.isfinite(v)])

    def acc_T(r: dict) -> float:
        return at(r, "acc", T)

    for key in by_key:
        if not key.endswith(":control") and key + ":control" in by_key:
            paired[f"{key}_minus_control"] = {"acc_at_T": diff(key, key + ":control", acc_T),
                                              "acc_at_T_stable": diff(key, key + ":control", acc_T, stable=True),
                                              "loss_at_T": diff(key, key + ":control", lambda r: at(r, "loss", T))}
    for a, b in PAIRS:
        if a not in by_key or b not in by_key:
            continue
        p = {"acc_at_T": diff(a, b, acc_T), "loss_at_T": diff(a, b, lambda r: at(r, "loss", T)),
             "auc_at_T": diff(a, b, lambda r: at(r, "auc", T)),
             "final_acc": diff(a, b, lambda r: float(r["acc"][-1]))}
        common = sorted(set(by_key[a]) & set(by_key[b]))
        ratios = [first_reach(by_key[b][s], target, T, "acc") / first_reach(by_key[a][s], target, T, "acc")
                  for s in common]
        p["time_to_target_ratio_b_over_a"] = iv([q for q in ratios if math.isfinite(q)])
        ca, cb = a + ":control", b + ":control"
        if ca in by_key and cb in by_key:
            p["controls_acc_at_T"] = diff(ca, cb, acc_T)
            both = sorted(set(common) & set(by_key[ca]) & set(by_key[cb]))
            p["interaction_acc_at_T"] = iv([at(by_key[a][s], "acc", T) - at(by_key[b][s], "acc", T)
                                             - at(by_key[ca][s], "acc", T) + at(by_key[cb][s], "acc", T)
                                             for s in both])
        p["acc_at_T_stable"] = diff(a, b, acc_T, stable=True)
        paired[f"{a}_minus_{b}"] = p
    return {"T_s": T, "target_acc": target, "target_auc": auc_target, "rise_tol": RISE_TOL, "methods": methods,
            "paired": paired}


# -- writing -----------------------------------------------------------------------------------------------------
def pm(v: list, scale: float = 100, digits: int = 2, signed: bool = False) -> str:
    if v[0] is None:
        return "-"
    head = f"{v[0] * scale:{'+' if signed else ''}.{digits}f}"
    return head if v[1] is None else f"{head} +- {v[1] * scale:.{digits}f}"


def curve(m: dict) -> str:
    """The curve at T: "stopped rising" (the rule), "rising" (its gain's interval above 0), or "undecided"."""
    return "stopped rising" if m["stopped_rising"] else "rising" if m["rising"] else "undecided"


def table_md(setting: str, S: dict) -> list[str]:
    tgt = f"{100 * S['target_acc']:g}%"
    lines = [f"### {setting}", "",
             f"Equal budget T = {S['T_s']:.2f} simulated s. Mean +- 95% t interval over seeds; every run counted.", "",
             f"| method | seeds | diverged | acc. at T (%) | test loss at T | weight AUC at T | gain over [3T/4, T] "
             f"(points) | curve at T | gain per quarter, last-half slope (points) | curve by the slope rule | "
             f"reached {tgt} by T | time to {tgt} (s) | reached AUC {S['target_auc']:g} | "
             f"time to AUC (s) | final acc. (%) at own end | own end (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, m in S["methods"].items():
        lines.append(
            f"| {m['label']} | {','.join(map(str, m['seeds']))} | {m['diverged']}/{m['n']} | {pm(m['acc_at_T'])} | "
            f"{pm(m['loss_at_T'], 1, 4)} | {pm(m['auc_at_T'], 1, 3)} | {pm(m['rise_last_quarter'], 100, 2, True)} | "
            f"{curve(m)} | {pm(m['quarter_gain'], 100, 2, True)} | {m['curve_by_slope']} | "
            f"{m['reached_target']}/{m['n']} | "
            f"{pm(m['time_to_target'], 1, 2)} | {m['reached_auc_target']}/{m['n']} | "
            f"{pm(m['time_to_auc_target'], 1, 2)} | {pm(m['final_acc'])} | {pm(m['final_clock_s'], 1, 1)} |")
    onsets = [(m["label"], o) for m in S["methods"].values() for o in m["onsets"]]
    if onsets:
        lines += ["", f"Diverged runs: where each first leaves its path (its test loss above {ONSET_RATIO:g} x the "
                  f"lowest before it or not finite, or the spread (std) of the log-coefficients x up by more than "
                  f"{SPREAD_JUMP:g} in one record), with the record before it; the last upper-level step before the "
                  "onset that widened the spread.", "",
                  "| method | seed | onset (s) | record | acc. before (%) | test loss before -> at onset -> at the end "
                  "| spread of x before -> at onset -> at the end | last widening before (s: spread) |",
                  "|---|---|---|---|---|---|---|---|"]
        for label, o in onsets:
            if o["record"] is None:
                lines.append(f"| {label} | {o['seed']} | none in its records (its last at {o['clock_s']:.2f} s) "
                             "| - | - | - | - | - |")
                continue
            spread = ("-" if o["spread_at"] is None else
                      f"{o['spread_before']:.3g} -> {o['spread_at']:.3g} -> {o['spread_end']:.3g}")
            w = o["widened"]
            wide = "-" if w is None else f"{w['clock_s']:.2f}: {w['from']:.3g} -> {w['to']:.3g}"
            lines.append(f"| {label} | {o['seed']} | {o['clock_s']:.2f} | {o['record']} | "
                         f"{100 * o['acc_before']:.2f} | {o['loss_before']:.4g} -> {o['loss_at']:.4g} -> "
                         f"{o['loss_end']:.4g} | {spread} | {wide} |")
    if any(m["diverged"] for m in S["methods"].values()):
        lines += ["", "Over the seeds where neither run of a pair diverged (read after the runs, not the "
                  "pre-registered reading; accuracy at T, points):", ""]
        lines += [f"- {name.replace('_minus_', ' - ')}: {pm(p['acc_at_T_stable'], 100, 2, True)} "
                  f"(n = {p['acc_at_T_stable'][2]})" for name, p in S["paired"].items()]
    lines += ["", "Paired by seed (A - B; points of accuracy, test loss, AUC):", "",
              "| A - B | acc. at T | test loss at T | AUC at T | final acc. (own ends) | controls' gap at T | "
              "interaction (2 x 2) at T | B's time to target / A's |", "|---|---|---|---|---|---|---|---|"]
    for name, p in S["paired"].items():
        if name.endswith("_minus_control"):
            continue
        lines.append(f"| {name.replace('_minus_', ' - ')} | {pm(p['acc_at_T'], 100, 2, True)} | "
                     f"{pm(p['loss_at_T'], 1, 4, True)} | {pm(p['auc_at_T'], 1, 3, True)} | "
                     f"{pm(p['final_acc'], 100, 2, True)} | {pm(p.get('controls_acc_at_T', [None]), 100, 2, True)} | "
                     f"{pm(p.get('interaction_acc_at_T', [None]), 100, 2, True)} | "
                     f"{pm(p['time_to_target_ratio_b_over_a'], 1, 2)} |")
    lines += ["", "The interaction is the 2 x 2 design's (engine x upper level on / outer-lr = 0), paired by seed: "
              "(A - A's control) - (B - B's control) = (A - B) - (the controls' gap). 0 means the two add: the "
              "controls' gap would then be the whole engine effect. An interval that excludes 0 says they do not "
              "add: each upper level adds a different amount on its own engine (including how often the engine "
              "lets it step), so A - B has no split into \"asynchrony\" and \"bilevel\" parts.", "",
              "Each method minus its own outer-lr = 0 control at T:", ""]
    for name, p in S["paired"].items():
        if name.endswith("_minus_control"):
            lines.append(f"- {name.replace('_minus_control', '')}: accuracy {pm(p['acc_at_T'], 100, 2, True)} "
                         f"points, test loss {pm(p['loss_at_T'], 1, 4, True)}")
    return lines + [""]


def figure(setting: str, runs: list[dict], S: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zofl.figures import save

    fig, ax = plt.subplots(figsize=(7, 4))
    grid = np.linspace(0, S["T_s"], 200)
    strategies = sorted({key.split(":")[0] for key in S["methods"]})
    for key, m in S["methods"].items():
        rs = [r for r in runs if r["key"] == key]
        mat = np.array([[at(r, "acc", t) for t in grid] for r in rs]) * 100
        mean, half = band(mat)  # the 95% t band over the seeds
        color = f"C{strategies.index(key.split(':')[0])}"  # a method and its control: one colour, solid / dashed
        ax.plot(grid, mean, color=color, ls="--" if key.endswith(":control") else "-",
                label=f"{m['label']} (n={m['n']})")
        if len(rs) > 1:
            ax.fill_between(grid, mean - half, mean + half, color=color, alpha=0.15)
    ax.axhline(100 * S["target_acc"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(85, 92)
    ax.set_title(setting, fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path, dpi=90)
    plt.close(fig)


def report(out: Path, target: float, auc_target: float, below: float, figures: bool = True) -> dict:
    runs, _ = load(out, below)
    summary = {}
    for setting in sorted({r["setting"] for r in runs}):
        rs = [r for r in runs if r["setting"] == setting]
        summary[setting] = setting_summary(rs, target, auc_target)
        if figures:
            figure(setting, rs, summary[setting], out / f"fig_verdict_{setting}.png")
    (out / "verdict.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    lines = ["Generated by `python experiments/afbo_verdict.py --from " + str(out) + "` from runs.csv and "
             "rounds.parquet (experiments/afbo_verdict.py's docstring defines every column).", ""]
    for setting, S in summary.items():
        lines += table_md(setting, S)
    (out / "verdict.md").write_text("\n".join(lines))
    return summary


def study_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a study script that packs compare folders (RUNS --out DIR) or recomputes a committed study
    (--from DIR), with the targets and the divergence bound (this script's and experiments/afbo_ceiling.py's)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("runs", nargs="*", type=Path, help="compare output folders to pack")
    ap.add_argument("--out", type=Path, help="the study folder to write (with RUNS)")
    ap.add_argument("--from", dest="src", type=Path, help="recompute a study folder from its committed files")
    ap.add_argument("--target", type=float, default=0.895)
    ap.add_argument("--auc-target", type=float, default=0.9)
    ap.add_argument("--no-figures", action="store_true", help="the numbers only")
    ap.add_argument("--diverged-below", type=float, default=0.5,
                    help="a run whose final test accuracy is below this counts as diverged (default 0.5)")
    return ap


def study_folder(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Path:
    """The study folder of ``study_parser``'s arguments: --from's, or --out's when RUNS are given."""
    if a.src is None and (not a.runs or a.out is None):
        ap.error("give RUNS_DIR ... --out DIR, or --from DIR")
    return a.src or a.out


def main(argv: list[str] | None = None) -> int:
    ap = study_parser(__doc__.split("\n")[0])
    a = ap.parse_args(argv)
    out = study_folder(ap, a)
    if a.src is None:
        pack(a.runs, out, a.diverged_below)
    report(out, a.target, a.auc_target, a.diverged_below, figures=not a.no_figures)
    print((out / "verdict.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
