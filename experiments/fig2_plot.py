"""Fig. 2 of the ZO-HFL paper from the runner's output: ZO-HFL's loss per round, one line per tau,
one panel per (alpha, beta) setting, one figure per dataset.

    python experiments/fig2_plot.py docs/results/fig2

Writes DIR/fig2_<dataset>.png with two rows of panels: the global objective estimate
f1 + f2 (the server's loss plus the clients' mean f2 estimate, the paper's "global loss") and the
test loss. Only finished cells (in DIR/rounds.csv) are drawn.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    series: dict[str, dict[tuple, dict[float, list]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row in csv.DictReader(open(out / "rounds.csv")):
        if row["round"] == "0":
            continue
        key = (float(row["alpha"]), float(row["beta"]))
        obj = float(row["objective"]) if row["objective"] not in ("", "None") else float("nan")
        series[row["dataset"]][key][float(row["tau"])].append((int(row["round"]), obj, float(row["test_loss"])))
    for dataset, settings in series.items():
        keys = sorted(settings, key=lambda k: -k[0])
        fig, axes = plt.subplots(2, len(keys), figsize=(4.2 * len(keys), 6.5), squeeze=False)
        for j, (alpha, beta) in enumerate(keys):
            for tau, pts in sorted(settings[(alpha, beta)].items()):
                pts.sort()
                rounds = [p[0] for p in pts]
                axes[0][j].plot(rounds, [p[1] for p in pts], label=f"tau = {tau:g}")
                axes[1][j].plot(rounds, [p[2] for p in pts], label=f"tau = {tau:g}")
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


if __name__ == "__main__":
    main()
