"""The step pick of FedRZO Fig. 2 left's setting on CIFAR-10 (experiments/fig2_fedrzo_hyper_cifar_tuning.toml).

    python experiments/fedrzo_fig2_cifar_picks.py docs/results/fig2_fedrzo_hyper_cifar_tuning \
        > docs/results/fig2_fedrzo_hyper_cifar_tuning/picks.md

Per (lower-lr, zo-lr): the test loss as the mean over the last 10% of upper rounds (the value at
y_eps(x_r) after each upper round, round 0 first), mean +- 95% t half-width over the tuning seeds, and
the mean x_i at the end; the pick is the lowest mean test loss (the criterion written in the grid before
the runs; ties: the smaller steps). A (lower-lr, zo-lr) with a failed or missing seed is not picked.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from report_common import upper_curve  # a module beside this script

from zofl.stats import fmt_interval, interval, run_figures
from zofl.study import study_runs


def main(study: Path) -> None:
    runs = study_runs(study)
    seeds = sorted({int(cfg["seed"]) for _, cfg, _ in runs})
    loss, xs = defaultdict(dict), defaultdict(dict)
    for _, cfg, recs in runs:
        key = (float(cfg["lower-lr"]), float(cfg["zo-lr"]))
        loss[key][int(cfg["seed"])] = run_figures(upper_curve(recs, "test_loss"))["last10"]
        xs[key][int(cfg["seed"])] = recs[-1]["x_mean"]
    complete = [k for k in loss if sorted(loss[k]) == seeds]
    best = min(complete, key=lambda k: (interval(list(loss[k].values()))[0], k))
    print(f"Picks on seeds {seeds} (H = 5; test loss: mean of the last 10% of upper rounds):\n")
    print("| lower-lr | zo-lr (gamma) | test loss (95% CI) | final mean x_i (95% CI) | seeds | |")
    print("|---|---|---|---|---|---|")
    for k in sorted(loss):
        mark = "**pick**" if k == best else ""
        print(f"| {k[0]:g} | {k[1]:g} | {fmt_interval(interval(list(loss[k].values())), 1, 4)} | "
              f"{fmt_interval(interval(list(xs[k].values())), 1, 4)} | {len(loss[k])} | {mark} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
