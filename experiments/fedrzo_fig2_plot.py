"""FedRZO paper (001), Fig. 2 from the runner's cells: left (hyperparameter learning), right (fair minimax).

    python experiments/fedrzo_fig2_plot.py docs/results/fig2_fedrzo_hyper docs/results/fig2_fedrzo_fair

Writes <dir>/fig2_left.png for a hyper-logistic study and <dir>/fig2_right.png for a fair-relu one
(metric per upper round, and per communication round, which counts the lower-level FedAvg rounds too),
one line per H (and gamma, where a study has several) with a 95% t-interval over seeds where there are
several, and prints markdown tables of each line's value (the mean over the last 10% of upper rounds, the
project's end-point measure, zofl.stats.run_figures) and of each H minus the next smaller H at its
gamma, paired by seed (mean +- 95% t half-width, n). A hyperparameter study's cells with H = 0
and hyper-x0 at x-min are the control with x fixed at the constraint's floor: a line of their own, and
each H against them paired by seed. The same script draws the CIFAR-10 studies:

    python experiments/fedrzo_fig2_plot.py docs/results/fig2_fedrzo_hyper_cifar docs/results/fig2_fedrzo_fair_cifar
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np
from report_common import band, upper_curve  # a module beside this script

from zofl.figures import save as save_figure
from zofl.results import read_rounds
from zofl.stats import fmt_interval, interval, paired, run_figures

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DATASETS = {"mnist": "MNIST", "cifar10": "CIFAR-10 (standardized)", "fashion_mnist": "Fashion-MNIST"}


FLOOR = "floor"  # the control with x fixed at the constraint's floor: H = 0 and hyper-x0 = x-min


def arm(cfg: dict) -> tuple[int | str, float | None]:
    """A cell's line: (its H, or FLOOR for x fixed at x-min; its gamma, None for the controls, H = 0 and FLOOR,
    which take no upper step)."""
    H = int(cfg["local-steps"]) if cfg["local-steps"] or cfg["tau"] else 0
    if H == 0 and cfg.get("hyper-x0") is not None and float(cfg["hyper-x0"]) <= float(cfg.get("x-min", 0.0)):
        return FLOOR, None
    return H, (float(cfg["zo-lr"]) if H else None)


def line_name(key: tuple[int | str, float | None], gammas: bool) -> str:
    """A line's name in the tables: "H", or "H, gamma g" where the study has several gammas."""
    H, g = key
    if H == FLOOR:
        return "0, x at x-min (control)"
    return f"{H}, gamma {g:g}" if gammas and g is not None else str(H)


def load(out: Path) -> dict[tuple[int | str, float | None], list[tuple[dict, list[dict]]]]:
    """Line (arm) -> [(config, all records)] of the finished cells: FLOOR first, then by H and gamma."""
    by_h = defaultdict(list)
    for cell in sorted((out / "cells").glob("*")):
        if not (cell / "summary.json").exists():
            continue
        cfg = json.loads((cell / "config.json").read_text())
        recs = read_rounds(cell)  # rounds.jsonl, or the study's rounds.parquet
        by_h[arm(cfg)].append((cfg, recs))
    return dict(sorted(by_h.items(), key=lambda kv: (-1 if kv[0][0] == FLOOR else kv[0][0], kv[0][1] or 0.0)))


def curves(runs, metric: str):
    """Per upper round (the value after the upper round) and per communication round."""
    upper = np.array([upper_curve(recs, metric) for _, recs in runs], dtype=float)
    comm = np.array([[r[metric] for r in recs] for _, recs in runs], dtype=float)
    return upper, comm


def end(cfg: dict, recs: list[dict], metric: str) -> float:
    """A run's end point: the mean of the metric over the last 10% of its upper rounds."""
    return run_figures(upper_curve(recs, metric))["last10"]


def plot(out: Path, name: str, metrics: list[tuple[str, str]], title: str) -> None:
    by_h = load(out)
    if not by_h:
        print(f"{out}: no finished cells")
        return
    title = title.format(dataset=DATASETS.get(next(iter(by_h.values()))[0][0]["dataset"], "?"))
    fig, axes = plt.subplots(len(metrics), 2, figsize=(11, 3.6 * len(metrics)), squeeze=False)
    rows = []
    gammas = len({g for _, g in by_h if g is not None}) > 1
    for key, runs in by_h.items():
        H = key[0]
        label = ("control: x fixed at x-min" if H == FLOOR else f"H = {line_name(key, gammas)}"
                 + (" (control: x fixed at x_0)" if H == 0 else ""))
        for (metric, ylabel), ax_row in zip(metrics, axes):
            up, comm = curves(runs, metric)
            for ax, values, xlabel in ((ax_row[0], up, "upper round r"), (ax_row[1], comm, "communication round")):
                mean, half = band(values)
                x = np.arange(len(mean))
                ax.plot(x, mean, label=label)
                ax.fill_between(x, mean - half, mean + half, alpha=0.25)
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
        ends = {m: interval([end(cfg, recs, m) for cfg, recs in runs]) for m, _ in metrics}
        rows.append((line_name(key, gammas), len(runs), len(runs[0][1]) - 1, ends))
    axes[0][0].legend(fontsize=8)
    seeds = sorted({len(runs) for runs in by_h.values()})
    fig.suptitle(f"{title}\nbands: 95% t intervals over seeds (n = {'-'.join(map(str, seeds))} per line)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / name, dpi=110)
    plt.close(fig)
    print(f"{out / name}\n")
    print("| H | seeds | communication rounds | " + " | ".join(f"{m}, last 10% (95% CI)" for m, _ in metrics) + " |")
    print("|---|---|---|" + "---|" * len(metrics))
    for H, n, comm, ends in rows:
        cells = " | ".join(f"{ends[m][0]:.4f} +- {ends[m][1]:.4f}" if n > 1 else f"{ends[m][0]:.4f}"
                           for m, _ in metrics)
        print(f"| {H} | {n} | {comm} | {cells} |")
    print()
    paired_table(by_h, [m for m, _ in metrics])


def _fmt(t: tuple[float, float, int]) -> str:
    """mean +- 95% half-width (n) at 4 decimals, or in e-notation where both are below 1e-3 (which 4 decimals
    would print as a zero-width 0.0000 +- 0.0000)."""
    mean, half, n = t
    if n > 1 and max(abs(mean), half) < 1e-3:
        return f"{mean:.2e} +- {half:.2e} (n={n})"
    return fmt_interval(t, 1, 4)


def paired_table(by_h, metrics: list[str]) -> None:
    """End points of each H minus the next smaller H at the same gamma (the smallest minus the control H = 0),
    and of every line minus the control with x at x-min where there is one; paired by seed."""

    def finals(key, m):
        return {int(cfg["seed"]): end(cfg, recs, m) for cfg, recs in by_h[key]}

    gammas = sorted({g for _, g in by_h if g is not None})
    pairs = []
    for g in gammas or [None]:
        chain = [k for k in by_h if k[0] == 0] + [k for k in by_h if k[0] not in (0, FLOOR) and k[1] == g]
        pairs += [(a, b) for a, b in zip(chain[1:], chain[:-1]) if (a, b) not in pairs]
    floor = (FLOOR, None)
    pairs += [(k, floor) for k in by_h if k != floor and floor in by_h]
    many = len(gammas) > 1
    print("| H - H' (paired by seed) | " + " | ".join(f"{m}, last 10%" for m in metrics) + " |")
    print("|---|" + "---|" * len(metrics))
    for a, b in pairs:
        right = "x at x-min (control)" if b == floor else line_name(b, many)
        print(f"| {line_name(a, many)} - {right} | " + " | ".join(_fmt(paired(finals(a, m), finals(b, m)))
                                                             for m in metrics) + " |")
    print()


def main(argv: list[str]) -> None:
    """Each study folder is drawn by its task: hyper-logistic as Fig. 2 left, fair-relu as Fig. 2 right."""
    for out in map(Path, argv):
        runs = load(out)
        task = next(iter(runs.values()))[0][0]["task"] if runs else None
        if task == "hyper-logistic":
            plot(out, "fig2_left.png", [("test_loss", "test loss (logistic)"), ("x_mean", "mean x_i")],
                 "FedRZO_bl, federated hyperparameter learning ({dataset} 0-4 vs 5-9, m = 5): test loss at y_eps(x_r)")
        elif task == "fair-relu":
            plot(out, "fig2_right.png", [("test_acc", "test accuracy"), ("worst_group_acc", "worst class's accuracy")],
                 "FedRZO_bl, fair classification minimax (ReLU net N1 = 4, {dataset} 0-4 vs 5-9, m = 5)")
        else:
            print(f"{out}: no finished cells of hyper-logistic or fair-relu")


if __name__ == "__main__":
    main(sys.argv[1:])
