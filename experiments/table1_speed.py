"""Speed on Table I's settings, not only the end point: how early each method gains, paired by seed.

    python experiments/table1_speed.py > docs/results/table1_speed.md
    python experiments/table1_speed.py --summary > docs/results/table1_speed_summary.md
    python experiments/table1_speed.py --seeds 0,1,2

``--summary`` prints the rows docs/results/README.md's one-screen table gains (its columns): each
method's early accuracy minus f1-only's, and rounds to x_0 + 1 point.

The measures were fixed before any number was computed (2026-11-27; the runs themselves had been made
for the end-point tables), and are the only ones computed:

1. **Early accuracy**: the mean test accuracy over rounds 1..R/5 (R = 500: rounds 1-100), i.e. the
   area under the accuracy curve over the first fifth of the run divided by its width; per method
   minus f1-only (ZO-HFL's own server steps, no clients, at ZO-HFL's gamma of that dataset and
   setting), paired by seed.
2. **Rounds to x_0 + 1 point**: the first round whose test accuracy is at least x_0's + 0.01; a run
   that never gets there within R rounds is counted as not reaching it (shown as k/n reached; the
   mean +- 95% t interval is over the runs that reach it, and only when all do).

The runs: the tuned Table I grids (experiments/table1_tuned_small.toml: MNIST and Fashion-MNIST;
experiments/table1_tuned_cifar_wide.toml: CIFAR-10; only the cells of those grids, seeds 0-2) and the
f1-only controls run at each ZO-HFL gamma (table1_controls, table1_controls_tuned,
table1_controls_cifar, table1_tuned_seeds5), matched by dataset, seed and gamma (f1-only does not
read the clients, so alpha and beta do not change it). Records are read from each study's packed
rounds.parquet (zofl.packed).
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from report_common import short  # a module beside this script

from zofl.compare import cell_id, expand_grid
from zofl.stats import fmt_interval, interval, paired
from zofl.study import study_runs

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT / "docs" / "results"
GRIDS = [(RES / "table1_tuned_small", ROOT / "experiments" / "table1_tuned_small.toml"),
         (RES / "table1_tuned_cifar_wide", ROOT / "experiments" / "table1_tuned_cifar_wide.toml")]
CONTROLS = [RES / d for d in (
    "table1_controls", "table1_controls_tuned", "table1_controls_cifar", "table1_tuned_seeds5")]
METHODS = {"zohfl": "ZO-HFL", "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD"}
DATASETS = {"mnist": "MNIST", "fashion_mnist": "Fashion", "cifar10": "CIFAR-10"}
SETTINGS = ((1000.0, 0.9), (1.0, 0.5), (0.1, 0.1))
TARGET = 0.01  # x_0 + 1 point


def early(acc: list[float], rounds: int) -> float:
    """Mean test accuracy over rounds 1..R/5 (acc[0] is round 0, x_0)."""
    k = max(1, rounds // 5)
    return sum(acc[1:k + 1]) / k


def rounds_to(acc: list[float], gain: float = TARGET) -> int | None:
    """The first round whose accuracy is at least x_0's + gain; None if no round of the run is."""
    return next((r for r, a in enumerate(acc) if r > 0 and a >= acc[0] + gain - 1e-12), None)


def _runs(grids, controls, seeds):
    """(strategy, dataset, alpha, beta) -> seed -> (gamma, accuracies); f1-only: (dataset, gamma) -> seed -> acc."""
    methods, f1 = {}, {}
    for study, grid in grids:
        ids = {cell_id(c) for c in expand_grid(tomllib.loads(grid.read_text()))}
        for cell, cfg, recs in study_runs(study):
            if cell in ids and cfg["seed"] in seeds and cfg["strategy"] in METHODS:
                key = (cfg["strategy"], cfg["dataset"], float(cfg["alpha"]), float(cfg["beta"]))
                methods.setdefault(key, {})[cfg["seed"]] = (cfg["gamma"], [r["test_acc"] for r in recs])
    for study in controls:
        for _, cfg, recs in study_runs(study):
            if cfg["strategy"] == "f1-only" and cfg["seed"] in seeds:
                f1.setdefault((cfg["dataset"], cfg["gamma"]), {})[cfg["seed"]] = [r["test_acc"] for r in recs]
    return methods, f1


def _f1_at_zohfl_gamma(methods, f1, d, a, b) -> dict[int, list[float]]:
    """seed -> f1-only's accuracies at the gamma ZO-HFL runs with in this dataset and setting (the
    control of every method of the column, as in the summary table)."""
    gammas = {g for g, _ in methods.get(("zohfl", d, a, b), {}).values()}
    return f1.get((d, gammas.pop()), {}) if len(gammas) == 1 else {}


def _reach(vals: list[int | None]) -> str:
    got = [v for v in vals if v is not None]
    if len(got) < len(vals):
        return f"{len(got)}/{len(vals)} reached" + (f" (rounds {', '.join(map(str, sorted(got)))})" if got else "")
    return fmt_interval(interval(got), digits=1)


def summary(methods, f1) -> None:
    """The one-screen table's speed rows: the same columns, early accuracy minus f1-only's and rounds to x_0 + 1."""
    cols = [(d, a, b) for d in DATASETS for a, b in SETTINGS]
    head = [f"{DATASETS[d]} ({a:g}, {int(100 * b)}%)" for d, a, b in cols]
    print("|  | " + " | ".join(head) + " |")
    print("|---|" + "---|" * len(cols))
    reach = {}
    for s, name in METHODS.items():
        row = []
        for d, a, b in cols:
            runs = methods.get((s, d, a, b), {})
            e = {seed: 100 * early(acc, len(acc) - 1) for seed, (_, acc) in runs.items()}
            c = {seed: 100 * early(acc, len(acc) - 1) for seed, acc in _f1_at_zohfl_gamma(methods, f1, d, a, b).items()}
            row.append(short(paired(e, c)) if set(e) & set(c) else "")
            reach.setdefault(name, []).append(_reach([rounds_to(acc) for _, acc in runs.values()]) if runs else "")
        print(f"| speed: {name} adds, early (rounds 1-100) | " + " | ".join(row) + " |")
    ctrl = [_f1_at_zohfl_gamma(methods, f1, d, a, b) for d, a, b in cols]
    reach["*f1-only*"] = [_reach([rounds_to(acc) for acc in c.values()]) if c else "" for c in ctrl]
    for name in ("ZO-HFL", "SCAFFOLD", "*f1-only*"):
        print(f"| speed: {name}, rounds to x_0 + 1 point | " + " | ".join(reach[name]) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--summary", action="store_true", help="only the one-screen table's speed rows")
    args = ap.parse_args()
    seeds = {int(s) for s in args.seeds.split(",")}
    methods, f1 = _runs(GRIDS, CONTROLS, seeds)
    if args.summary:
        summary(methods, f1)
        return
    p = print
    p("# Table I: speed (early accuracy and rounds to x_0 + 1 point)\n")
    p("Written by `python experiments/table1_speed.py > docs/results/table1_speed.md` from the committed "
      "records (the measures, fixed before computing, and the runs: the script's docstring). Seeds "
      f"{','.join(map(str, sorted(seeds)))}; mean +- the half-width of the 95% t interval (n). "
      "An interval that contains 0 is below the noise.\n")
    p("## Early accuracy: mean test accuracy (%) over rounds 1-100 of 500, minus f1-only's (paired by seed)\n")
    cols = [(d, a, b) for d in DATASETS for a, b in SETTINGS]
    head = [f"{DATASETS[d]} ({a:g}, {int(100 * b)}%)" for d, a, b in cols]
    p("| | " + " | ".join(head) + " |")
    p("|---|" + "---|" * len(cols))
    reach_rows = []
    for s, name in METHODS.items():
        early_row, diff_row, reach_row = [], [], []
        for d, a, b in cols:
            runs = methods.get((s, d, a, b), {})
            if not runs:
                early_row.append("not run"), diff_row.append(""), reach_row.append("")
                continue
            e = {seed: 100 * early(acc, len(acc) - 1) for seed, (_, acc) in runs.items()}
            early_row.append(fmt_interval(interval(e.values())))
            ctrl = _f1_at_zohfl_gamma(methods, f1, d, a, b)
            c = {seed: 100 * early(acc, len(acc) - 1) for seed, acc in ctrl.items()}
            diff_row.append(fmt_interval(paired(e, c)) if set(e) & set(c) else "no f1-only")
            reach_row.append(_reach([rounds_to(acc) for _, acc in runs.values()]))
        p(f"| {name}: early accuracy | " + " | ".join(early_row) + " |")
        p(f"| {name} - f1-only | " + " | ".join(diff_row) + " |")
        reach_rows.append((name, reach_row))
    f1_row, f1_reach = [], []
    for d, a, b in cols:
        ctrl = _f1_at_zohfl_gamma(methods, f1, d, a, b)
        f1_row.append(fmt_interval(interval(100 * early(acc, len(acc) - 1) for acc in ctrl.values())))
        f1_reach.append(_reach([rounds_to(acc) for acc in ctrl.values()]) if ctrl else "")
    p("| *f1-only (ZO-HFL's gamma): early accuracy* | " + " | ".join(f1_row) + " |")
    p("\n## Rounds to x_0 + 1 point of test accuracy (of 500)\n")
    p("| | " + " | ".join(head) + " |")
    p("|---|" + "---|" * len(cols))
    for name, row in reach_rows + [("*f1-only (ZO-HFL's gamma)*", f1_reach)]:
        p(f"| {name} | " + " | ".join(row) + " |")
    _fig2(p, seeds)


def _fig2(p, seeds) -> None:
    """The same two measures on Fig. 2's runs (the paper's steps; tau = 5, 20, 50), against f1-only at
    the same gamma (experiments/fig2_controls.toml)."""
    f1 = {}
    for _, cfg, recs in study_runs(RES / "fig2_controls"):
        if cfg["strategy"] == "f1-only" and cfg["seed"] in seeds:
            f1.setdefault((cfg["dataset"], cfg["gamma"]), {})[cfg["seed"]] = [r["test_acc"] for r in recs]
    runs = {}
    for study in ("fig2_seeds", "fig2_cifar"):
        for _, cfg, recs in study_runs(RES / study):
            if cfg["strategy"] == "zohfl" and cfg["seed"] in seeds:
                key = (cfg["dataset"], float(cfg["alpha"]), float(cfg["beta"]), cfg["tau"], cfg["gamma"])
                runs.setdefault(key, {})[cfg["seed"]] = [r["test_acc"] for r in recs]
    p("\n## Fig. 2's runs (the paper's steps): ZO-HFL's early accuracy minus f1-only's, and rounds to x_0 + 1 point\n")
    p("experiments/fig2_seeds.toml (Fashion-MNIST, gamma 0.01) and experiments/fig2_cifar.toml (CIFAR-10, gamma "
      "0.0004), f1-only at the same gamma from experiments/fig2_controls.toml; points, paired by seed.\n")
    p("| dataset (alpha, beta) | tau | ZO-HFL - f1-only, early accuracy | ZO-HFL: rounds to x_0 + 1 | "
      "f1-only: rounds to x_0 + 1 |")
    p("|---|---|---|---|---|")
    for (d, a, b, tau, g), by_seed in sorted(runs.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][3])):
        ctrl = f1.get((d, g), {})
        e = {s: 100 * early(acc, len(acc) - 1) for s, acc in by_seed.items()}
        c = {s: 100 * early(acc, len(acc) - 1) for s, acc in ctrl.items()}
        reach, reach_f1 = (_reach([rounds_to(a) for a in by_seed.values()]),
                           _reach([rounds_to(a) for a in ctrl.values()]))
        p(f"| {DATASETS[d]} ({a:g}, {int(100 * b)}%) | {tau:g} | {fmt_interval(paired(e, c))} | {reach} | {reach_f1} |")


if __name__ == "__main__":
    main()
