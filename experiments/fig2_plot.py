"""Fig. 2 of the ZO-HFL paper from the runner's output: ZO-HFL's loss per round, one line per tau,
one panel per (alpha, beta) setting, one figure per dataset.

    python experiments/fig2_plot.py docs/results/fig2_seeds

Writes DIR/fig2_<dataset>.png with two rows of panels: the global objective estimate
f1 + f2 (the server's loss plus the clients' mean f2 estimate, the paper's "global loss") and the
test loss; with several seeds, each line is the mean over seeds and the band the seeds' range.
Writes DIR/fig2_loss.md: per setting and tau, the final test loss and the mean of the last 10% of
rounds (mean +- 95% t interval over seeds), and the paired differences tau - 20 over the same seeds
(an interval that contains 0 is below the noise). Only finished cells (in DIR/rounds.csv) are used.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from zofl.stats import fmt_interval, interval, paired, run_figures  # noqa: E402

REFERENCE_TAU = 20.0


def _read(out: Path) -> dict:
    """dataset -> (alpha, beta) -> tau -> seed -> [(round, objective, test_loss)] (rounds >= 1, in order)."""
    series: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for row in csv.DictReader(open(out / "rounds.csv")):
        if row["round"] == "0":
            continue
        key = (float(row["alpha"]), float(row["beta"]))
        obj = float(row["objective"]) if row["objective"] not in ("", "None") else float("nan")
        series[row["dataset"]][key][float(row["tau"])][int(row["seed"])].append(
            (int(row["round"]), obj, float(row["test_loss"])))
    for settings in series.values():
        for taus in settings.values():
            for by_seed in taus.values():
                for pts in by_seed.values():
                    pts.sort()
    return series


def _plot(out: Path, dataset: str, settings: dict) -> None:
    keys = sorted(settings, key=lambda k: -k[0])
    fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6.5), squeeze=False)
    for j, (alpha, beta) in enumerate(keys):
        for tau, by_seed in sorted(settings[(alpha, beta)].items()):
            runs = list(by_seed.values())
            n = min(len(r) for r in runs)
            rounds = [p[0] for p in runs[0][:n]]
            for i, field in ((0, 1), (1, 2)):
                v = np.array([[p[field] for p in r[:n]] for r in runs])
                line, = axes[i][j].plot(rounds, v.mean(axis=0), label=f"tau = {tau:g} (n = {len(runs)})")
                if len(runs) > 1:
                    axes[i][j].fill_between(rounds, v.min(axis=0), v.max(axis=0), color=line.get_color(), alpha=0.15)
        axes[0][j].set_title(f"{dataset}: alpha = {alpha:g}, beta = {int(100 * beta)}%", fontsize=9)
        axes[0][j].set_ylabel("f1 + f2 estimate")
        axes[1][j].set_ylabel("test loss")
        for i in (0, 1):
            axes[i][j].set_xlabel("round")
            axes[i][j].grid(alpha=0.3)
            axes[i][j].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"fig2_{dataset}.png", dpi=110)
    plt.close(fig)
    print(f"wrote {out / f'fig2_{dataset}.png'}")


def _table(series: dict) -> list[str]:
    lines = ["Test loss of ZO-HFL (lower is better): mean +- the half-width of the 95% t interval over seeds "
             f"(n). Paired: tau minus tau = {REFERENCE_TAU:g} on the same seeds (same split, x_0, sampling and directions); "
             "an interval that contains 0 is below the noise.", ""]
    for fig_key, title in (("final", "final round"), ("last10", "mean of the last 10% of rounds")):
        lines += [f"### {title}", "", f"| dataset, (alpha, beta) | tau | test loss | tau - {REFERENCE_TAU:g}, paired, in units of 1e-4 |",
                  "|---|---|---|---|"]
        for dataset, settings in series.items():
            for (alpha, beta) in sorted(settings, key=lambda k: -k[0]):
                figs = {tau: {s: run_figures([p[2] for p in pts])[fig_key] for s, pts in by_seed.items()}
                        for tau, by_seed in settings[(alpha, beta)].items()}
                for tau in sorted(figs):
                    diff = "" if tau == REFERENCE_TAU or REFERENCE_TAU not in figs else \
                        fmt_interval(paired(figs[tau], figs[REFERENCE_TAU]), scale=1e4, digits=1)
                    lines.append(f"| {dataset} ({alpha:g}, {int(100 * beta)}%) | {tau:g} | "
                                 f"{fmt_interval(interval(figs[tau].values()), digits=4)} | {diff} |")
        lines.append("")
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    series = _read(out)
    for dataset, settings in series.items():
        _plot(out, dataset, settings)
    (out / "fig2_loss.md").write_text("\n".join(_table(series)) + "\n")
    print(f"wrote {out / 'fig2_loss.md'}")


if __name__ == "__main__":
    main()
