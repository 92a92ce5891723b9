"""FedRZO's Fig. 1 against its controls: each (gamma, H) cell at eta = 0.1 minus x_0 alone and minus
the ReLU network's centralised ceiling (experiments/fig1_fedrzo_controls.toml, the step with the
highest mean), paired by seed, last-10% test accuracy (%), +- the half-width of the 95% t interval.

    python experiments/fig1_fedrzo_report.py docs/results/fig1_fedrzo docs/results/fig1_fedrzo_controls \
        > docs/results/fig1_fedrzo_controls/against.md
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from zofl.stats import fmt_interval, interval, paired


def _last10(rows: list[dict], **want: str) -> dict[int, float]:
    return {int(r["seed"]): float(r["last10_test_acc"]) for r in rows if all(r.get(k) == v for k, v in want.items())}


def main(fig1: str, controls: str) -> None:
    runs = list(csv.DictReader(open(Path(fig1) / "results.csv")))
    ctrl = list(csv.DictReader(open(Path(controls) / "results.csv")))
    x0 = _last10(ctrl, strategy="x0-only")
    steps = sorted({r["local-lr"] for r in ctrl if r["strategy"] == "centralised"}, key=float)
    by_step = {lr: _last10(ctrl, strategy="centralised", **{"local-lr": lr}) for lr in steps}
    best = max(steps, key=lambda lr: interval(by_step[lr].values())[0])
    ceiling = by_step[best]
    pm = lambda t: fmt_interval(t, 100, 2)  # noqa: E731
    print("# FedRZO Fig. 1 against its controls\n")
    print(f"Written by `python experiments/fig1_fedrzo_report.py {fig1} {controls}`. Test accuracy (%), mean of the "
          "last 10% of 200 rounds, eta = 0.1; differences paired by seed. x_0 alone: "
          f"{pm(interval(x0.values()))}. Centralised SGD on all training data (the model's ceiling, from the task's "
          "random initial point): " + ", ".join(f"local-lr {lr}: {pm(interval(by_step[lr].values()))}" for lr in steps)
          + f"; the ceiling below is local-lr {best} (the highest mean, chosen on the same seeds).\n")
    print("| gamma (zo-lr) | H | FedRZO_nn | - x_0 | - ceiling |")
    print("|---|---|---|---|---|")
    for zo in sorted({r["zo-lr"] for r in runs}, key=float):
        for h in sorted({r["local-steps"] for r in runs}, key=int):
            f = _last10(runs, **{"zo-lr": zo, "local-steps": h, "eta": "0.1"})
            if f:
                print(f"| {float(zo):g} | {h} | {pm(interval(f.values()))} | {pm(paired(f, x0))} "
                      f"| {pm(paired(f, ceiling))} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
