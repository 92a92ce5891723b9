"""FedRZO paper (001), Fig. 1 as the paper draws it: FedRZO_nn's loss per communication round, one
line per H (local steps), one panel per smoothing radius eta; drawn from the runner's cells.

    python experiments/fedrzo_fig1_plot.py docs/results/fig1_fedrzo [--controls docs/results/fig1_fedrzo_controls]

Writes DIR/fig1.png: for each step size gamma (zo-lr) of the grid, largest first (the paper's is 1e-5;
the larger ones are ours), two rows of panels, the training objective f (the clients' mean loss,
records' ``f1``) and the test accuracy per communication round; a column per eta of the grid. Each line is the mean over
seeds with a band of the 95% t interval of that mean (n in the legend). With --controls: x_0 alone
(dotted) and the centralised first-order ceiling (dashed; at the step of its grid with the highest mean
last-10% accuracy) of experiments/fig1_fedrzo_controls.toml.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np
from report_common import band  # a module beside this script

from zofl.figures import save as save_figure
from zofl.stats import run_figures
from zofl.study import study_runs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PAPER_GAMMA = 1e-5
FIELDS = (("f1", "training objective f"), ("test_acc", "test accuracy (%)"))
CONTROLS = {"x0-only": ("x_0 alone", "0.5", ":"), "centralised": ("centralised SGD (ceiling)", "k", "--")}


def _series(out: Path, field: str) -> dict:
    """(gamma, eta, H) -> seed -> values per round (round 0 included); key "dataset": the dataset."""
    series: dict = defaultdict(dict)
    for _, cfg, recs in study_runs(out):
        series["dataset"] = cfg["dataset"]
        if cfg["strategy"] == "fedrzo-nn":
            key = (float(cfg["zo-lr"]), float(cfg["eta"]), int(cfg["local-steps"]))
            series[key][cfg["seed"]] = [np.nan if r.get(field) is None else float(r[field]) for r in recs]
    return series


def _controls(out: Path | None, field: str) -> dict:
    """strategy -> seed -> values per round; of the ceiling's steps (``local-lr``), the one with the highest
    mean over seeds of the last 10% of rounds' test accuracy (the ceiling: the best of the steps run)."""
    got: dict = defaultdict(lambda: defaultdict(dict))  # strategy -> step -> seed -> (values, last-10% accuracy)
    for _, cfg, recs in study_runs(out) if out else []:
        if cfg["strategy"] in CONTROLS:
            values = [np.nan if r.get(field) is None else float(r[field]) for r in recs]
            last10 = run_figures([r["test_acc"] for r in recs])["last10"]
            got[cfg["strategy"]][cfg.get("local-lr")][cfg["seed"]] = (values, last10)
    best = {}
    for name, by_step in got.items():
        step = max(by_step, key=lambda k: np.mean([a for _, a in by_step[k].values()]))
        best[name] = {seed: v for seed, (v, _) in by_step[step].items()}
    return best


def _draw(ax, by_seed: dict, scale: float, **style) -> None:
    runs = [by_seed[s] for s in sorted(by_seed)]
    n = min(len(r) for r in runs)
    mean, half = band(scale * np.array([r[:n] for r in runs]))
    line, = ax.plot(range(n), mean, label=f"{style.pop('label')} (n = {len(runs)})", **style)
    if len(runs) > 1:
        ax.fill_between(range(n), mean - half, mean + half, color=line.get_color(), alpha=0.15, linewidth=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the Fig. 1 grid's results folder (experiments/fig1_fedrzo.toml)")
    ap.add_argument("--controls", type=Path, help="experiments/fig1_fedrzo_controls.toml's folder")
    args = ap.parse_args()
    first = _series(args.out, "f1")
    keys = [k for k in first if k != "dataset"]
    if not keys:
        raise SystemExit(f"{args.out}: no finished FedRZO_nn cell")
    gammas = sorted({k[0] for k in keys}, reverse=True)
    etas = sorted({k[1] for k in keys}, reverse=True)
    fig, axes = plt.subplots(2 * len(gammas), len(etas), figsize=(max(4.3 * len(etas) + 1, 7.5), 3.0 * 2 * len(gammas)),
                             squeeze=False)
    for f, (field, label) in enumerate(FIELDS):
        scale = 100.0 if field == "test_acc" else 1.0
        series, controls = _series(args.out, field), _controls(args.controls, field)
        for g, gamma in enumerate(gammas):
            row = 2 * g + f
            for j, eta in enumerate(etas):
                ax = axes[row][j]
                for H in sorted({k[2] for k in series if k[:2] == (gamma, eta)}):
                    _draw(ax, series[(gamma, eta, H)], scale, label=f"H = {H}", linewidth=1.2)
                if field == "test_acc":
                    for name, (text, color, style) in CONTROLS.items():
                        if controls.get(name):
                            _draw(ax, controls[name], scale, label=text, color=color, linestyle=style, linewidth=1)
                ax.set_title(f"gamma = {gamma:g}{' (the paper)' if gamma == PAPER_GAMMA else ' (ours)'}, eta = {eta:g}",
                             fontsize=9)
                ax.set_xlabel("communication round")
                ax.set_ylabel(label)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
    fig.suptitle(f"FedRZO_nn, ReLU network (N1 = 4), {first['dataset']}, m = 5\nmean over seeds, bands = 95% t "
                 "interval of the mean; the ceiling at its best step", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    save_figure(fig, args.out / "fig1.png", dpi=100)
    plt.close(fig)
    print(f"wrote {args.out / 'fig1.png'}")


if __name__ == "__main__":
    main()
