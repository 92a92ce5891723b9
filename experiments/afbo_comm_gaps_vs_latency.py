"""The AFBO - FedNest gap against the communication latency (issue 31, items 2, 5, 11): one figure,
one panel per split, from the summary.json of each latency's study (afbo_plot.py figures) through
experiments/afbo_share.py's split: method gap, the outer-lr = 0 controls' gap (asynchrony alone), and
the bilevel part (their difference), at each study's budget T, mean and 95% t interval over the seeds
(paired by seed). Also prints the numbers as a markdown table.

    python experiments/afbo_comm_gaps_vs_latency.py --out docs/results/afbo/comm/fig_gaps_vs_latency.png
    python experiments/afbo_comm_gaps_vs_latency.py --task cleaning  # docs/results/afbo_cleaning, test accuracy

`--task regularization` (the default): docs/results/afbo/comm (digits regularization), test loss;
`--task cleaning`: the hyper-cleaning latency sweep (docs/results/afbo_cleaning: E8 = no stragglers at
comm-s 0, E9 = stragglers at c, and the sweep's folders), test accuracy in points.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from afbo_share import gaps  # a script beside this one
from report_common import AFBO, CONTROL, FEDNEST, split_of

from zofl.figures import save as save_figure
from zofl.stats import fmt_interval, interval

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
HERE = RESULTS / "afbo" / "comm"  # the regularization latency study's folder

LATENCIES = [("latency0", "0"), ("latency02c", "0.2c = 0.01 s"), ("latency1c", "c = 0.05 s"),
             ("latency10c", "10c = 0.5 s")]
STUDIES = [(pre + f, label, strag)
           for pre, strag in (("", "stragglers 0-4, factor 5"), ("nostragglers_", "no stragglers"))
           for f, label in LATENCIES]
STRAG, NOSTRAG = "stragglers 0-4, factor 5", "no stragglers"
CLEANING = [("study", "0", NOSTRAG), ("nostragglers_comm1c", "c = 0.05 s", NOSTRAG),
            ("nostragglers_comm10c", "10c = 0.5 s", NOSTRAG), ("stragglers_comm0", "0", STRAG),
            ("stragglers", "c = 0.05 s", STRAG), ("stragglers_noniid", "c = 0.05 s", STRAG),
            ("stragglers_comm10c", "10c = 0.5 s", STRAG), ("stragglers_noniid_comm0", "0", STRAG),
            ("stragglers_noniid_comm10c", "10c = 0.5 s", STRAG)]
REG_MNIST = [("study", "0", NOSTRAG), ("nostragglers_comm1c", "c = 0.05 s", NOSTRAG),
             ("nostragglers_comm10c", "10c = 0.5 s", NOSTRAG), ("stragglers_comm0", "0", STRAG),
             ("stragglers", "c = 0.05 s", STRAG), ("stragglers_comm10c", "10c = 0.5 s", STRAG)]
TASKS = {  # folder of the studies, the studies, the metric, its scale and unit
    "regularization": (HERE, STUDIES, "loss", 1.0, "difference in test loss at T (< 0: AFBO ahead)"),
    "cleaning": (RESULTS / "afbo_cleaning", CLEANING, "acc", 100.0, "difference in test accuracy at T, points "
                 "(> 0: AFBO ahead)"),
    "reg-mnist": (RESULTS / "afbo_reg_mnist", REG_MNIST, "loss", 1.0, "difference in test loss at T (< 0: AFBO ahead)"),
}


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), default="regularization")
    ap.add_argument("--out", type=Path, help="the figure (default: fig_gaps_vs_latency.png in the task's folder)")
    args = ap.parse_args(argv)
    root, studies, metric, scale, ylabel = TASKS[args.task]
    out = args.out or root / "fig_gaps_vs_latency.png"
    data: dict[str, list] = {}
    for folder, label, strag in studies:
        path = root / folder / "summary.json"
        if not path.exists():
            continue
        for key, setting in json.loads(path.read_text()).items():
            if AFBO + CONTROL not in setting["methods"] or FEDNEST + CONTROL not in setting["methods"]:
                continue
            g = gaps(setting["methods"], metric)
            data.setdefault((strag, split_of(key)), []).append(
                (label, setting["time_budget_s"], {k: interval([scale * x for x in v]) for k, v in g.items()}))
    keys = sorted(data, key=lambda k: (k[0] != "no stragglers", k[1]))
    ncol = 2
    nrow = (len(keys) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 4.3 * nrow), squeeze=False)
    series = [("method", "AFBO - FedNest", "k", "o"), ("control", "their outer-lr = 0 controls' gap (asynchrony)",
              "tab:green", "s"), ("bilevel", "bilevel part (method gap - controls' gap)", "tab:purple", "^")]
    for ax, (strag, split) in zip(axes.flat, keys):
        rows = data[(strag, split)]
        for j, (key, label, col, mk) in enumerate(series):
            xs = [i + (j - 1) * 0.12 for i in range(len(rows))]
            ys = [r[2][key][0] for r in rows]
            es = [r[2][key][1] for r in rows]
            ax.errorbar(xs, ys, yerr=es, fmt=mk, color=col, capsize=3, label=label)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(rows)), [f"{r[0]}\n(T = {r[1]:.0f} s, n = {r[2]['method'][2]})" for r in rows],
                      fontsize=8)
        ax.set_xlabel("comm-s: mean of each exponential message delay (c = 0.05 s, one task's compute)")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(f"{split}; {strag}", fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"AFBO - FedNest in test {metric} at the budget T, split into asynchrony and the bilevel part; "
                 "mean and 95% t interval over seeds (paired)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out, dpi=110)
    unit = "points" if scale == 100.0 else ""
    print(f"Test {metric} at each study's budget T, AFBO - FedNest, paired by seed (mean +- 95% t interval)"
          f"{', ' + unit if unit else ''}\n")
    print("| stragglers | split | comm-s | T (s) | n | AFBO - FedNest | controls' gap (asynchrony) | bilevel part |")
    print("|---|---|---|---|---|---|---|---|")
    digits = 2 if scale == 100.0 else 4
    for strag, split in keys:
        for label, T, g in data[(strag, split)]:
            print(f"| {strag} | {split} | {label} | {T:.1f} | {g['method'][2]} | "
                  + " | ".join(fmt_interval(g[k], digits=digits) for k in ("method", "control", "bilevel")) + " |")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
