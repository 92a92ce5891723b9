"""Fig. 2 of the ZO-HFL paper from the runner's output: ZO-HFL's loss per round, one line per tau,
one panel per (alpha, beta) setting, one figure per dataset.

    python experiments/fig2_plot.py docs/results/fig2_seeds [--controls docs/results/fig2_controls]

Writes DIR/fig2_<dataset>.png with two rows of panels: the global objective estimate
f1 + f2 (the server's loss plus the clients' mean f2 estimate, the paper's "global loss") and the
test loss; with several seeds, each line is the mean over seeds and its band the 95% t interval of
that mean (the controls' too).
Writes DIR/fig2_loss.md: per setting and tau, the final test loss and the mean of the last 10% of
rounds (mean +- 95% t interval over seeds), and the paired differences tau - 20 over the same seeds
(an interval that contains 0 is below the noise). Only finished cells are used (their records:
rounds.jsonl, or the study's rounds.parquet).
With --controls (experiments/fig2_controls.toml's folder): the controls' test loss drawn in the test-loss
panels (f1-only: ZO-HFL's server steps with no clients, dashed; x_0 alone, dotted), and each tau's
paired difference against f1-only on the same seeds: what the clients add to ZO-HFL's own server steps.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np
from report_common import band

from zofl.figures import save as save_figure
from zofl.stats import fmt_interval, interval, paired, run_figures
from zofl.study import study_runs

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REFERENCE_TAU = 20.0
CONTROLS = {"f1-only": ("k", "--"), "x0-only": ("0.5", ":")}


def _read_controls(out: Path | None) -> dict:
    """dataset -> control strategy -> seed -> [(round, test_loss)] from the controls' finished cells."""
    series: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    cells: dict = defaultdict(set)
    if out is None:
        return series
    for cell, cfg, recs in study_runs(out):
        if cfg["strategy"] not in CONTROLS:
            continue
        key = (cfg["dataset"], cfg["strategy"], int(cfg["seed"]))
        cells[key].add(cell)
        if len(cells[key]) > 1:
            sys.exit(f"{out}: more than one {cfg['strategy']} run for {cfg['dataset']}, seed {cfg['seed']}: "
                     "a Fig. 2 controls folder holds one per dataset and seed")
        series[cfg["dataset"]][cfg["strategy"]][int(cfg["seed"])] += [
            (int(r["round"]), float(r["test_loss"])) for r in recs if r["round"] != 0]
    for by_strategy in series.values():
        for by_seed in by_strategy.values():
            for pts in by_seed.values():
                pts.sort()
    return series


def _read(out: Path) -> dict:
    """dataset -> (alpha, beta) -> tau -> seed -> [(round, objective, test_loss)] (rounds >= 1, in order)."""
    series: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for _, cfg, recs in study_runs(out):
        key = (float(cfg["alpha"]), float(cfg["beta"]))
        series[cfg["dataset"]][key][float(cfg["tau"])][int(cfg["seed"])] += [
            (int(r["round"]), float("nan") if r.get("objective") is None else float(r["objective"]),
             float(r["test_loss"])) for r in recs if r["round"] != 0]
    for settings in series.values():
        for taus in settings.values():
            for by_seed in taus.values():
                for pts in by_seed.values():
                    pts.sort()
    return series


def _plot(out: Path, dataset: str, settings: dict, controls: dict) -> None:
    keys = sorted(settings, key=lambda k: -k[0])
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6.5), squeeze=False)
    for j, (alpha, beta) in enumerate(keys):
        for tau, by_seed in sorted(settings[(alpha, beta)].items()):
            runs = [by_seed[s] for s in sorted(by_seed)]
            n = min(len(r) for r in runs)
            rounds = [p[0] for p in runs[0][:n]]
            for i, field in ((0, 1), (1, 2)):
                mean, half = band(np.array([[p[field] for p in r[:n]] for r in runs]))
                line, = axes[i][j].plot(rounds, mean, label=f"tau = {tau:g} (n = {len(runs)})")
                if len(runs) > 1:
                    axes[i][j].fill_between(rounds, mean - half, mean + half, color=line.get_color(), alpha=0.15)
        for name, by_seed in controls.items():
            runs = [by_seed[s] for s in sorted(by_seed)]
            n = min(len(r) for r in runs)
            color, style = CONTROLS[name]
            mean, half = band(np.array([[p[1] for p in r[:n]] for r in runs]))
            rounds = [p[0] for p in runs[0][:n]]
            axes[1][j].plot(rounds, mean, color=color, linestyle=style, label=f"{name} (n = {len(runs)})")
            if len(runs) > 1:
                axes[1][j].fill_between(rounds, mean - half, mean + half, color=color, alpha=0.12)
        axes[0][j].set_title(f"{dataset}: alpha = {alpha:g}, beta = {int(100 * beta)}%", fontsize=9)
        axes[0][j].set_ylabel("f1 + f2 estimate")
        axes[1][j].set_ylabel("test loss")
        for i in (0, 1):
            axes[i][j].set_xlabel("round")
            axes[i][j].grid(alpha=0.3)
            axes[i][j].legend(fontsize=8)
    fig.suptitle(f"ZO-HFL, {dataset}: mean over seeds, bands = 95% t interval of the mean", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / f"fig2_{dataset}.png", dpi=110)
    plt.close(fig)
    print(f"wrote {out / f'fig2_{dataset}.png'}")


def _table(series: dict, controls: dict) -> list[str]:
    lines = ["Test loss of ZO-HFL (lower is better): mean +- the half-width of the 95% t interval over seeds "
             f"(n). Paired: tau minus tau = {REFERENCE_TAU:g} on the same seeds (same split, x_0, sampling and "
             "directions); "
             "an interval that contains 0 is below the noise."]
    if controls:
        lines[0] += (" Against f1-only: ZO-HFL minus the f1-only control (its server steps with no clients) on the "
                     "same seeds, what the clients add (negative: a lower loss with them).")
    lines.append("")
    for fig_key, title in (("final", "final round"), ("last10", "mean of the last 10% of rounds")):
        head = f"| dataset, (alpha, beta) | tau | test loss | tau - {REFERENCE_TAU:g}, paired, in units of 1e-4 |"
        rule = "|---|---|---|---|"
        if controls:
            head, rule = head + " ZO-HFL - f1-only, paired, in units of 1e-4 |", rule + "---|"
        lines += [f"### {title}", "", head, rule]
        for dataset, settings in series.items():
            ctrl = {name: {s: run_figures([p[1] for p in pts])[fig_key] for s, pts in by_seed.items()}
                    for name, by_seed in controls.get(dataset, {}).items()}
            for name in sorted(ctrl):
                lines.append(f"| {dataset}: *{name}* | | {fmt_interval(interval(ctrl[name].values()), digits=4)} | | |")
            for (alpha, beta) in sorted(settings, key=lambda k: -k[0]):
                figs = {tau: {s: run_figures([p[2] for p in pts])[fig_key] for s, pts in by_seed.items()}
                        for tau, by_seed in settings[(alpha, beta)].items()}
                for tau in sorted(figs):
                    diff = "" if tau == REFERENCE_TAU or REFERENCE_TAU not in figs else \
                        fmt_interval(paired(figs[tau], figs[REFERENCE_TAU]), scale=1e4, digits=1)
                    row = (f"| {dataset} ({alpha:g}, {int(100 * beta)}%) | {tau:g} | "
                           f"{fmt_interval(interval(figs[tau].values()), digits=4)} | {diff} |")
                    if controls:
                        row += (f" {fmt_interval(paired(figs[tau], ctrl['f1-only']), scale=1e4, digits=1)} |"
                                if "f1-only" in ctrl else " |")
                    lines.append(row)
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the Fig. 2 grid's results folder (cells/, rounds.parquet)")
    ap.add_argument("--controls", type=Path, default=None, help="results folder of experiments/fig2_controls.toml")
    args = ap.parse_args()
    out = args.out
    series = _read(out)
    controls_all = _read_controls(args.controls)
    controls = {d: dict(controls_all[d]) for d in series if d in controls_all}
    for dataset, settings in series.items():
        _plot(out, dataset, settings, controls.get(dataset, {}))
    (out / "fig2_loss.md").write_text("\n".join(_table(series, controls)) + "\n")
    print(f"wrote {out / 'fig2_loss.md'}")


if __name__ == "__main__":
    main()
