"""FedRZO_nn against FedAvg, FedProx, FedMSPP and Scaffnew (FedRZO paper 001, Sec. 5.1): the picks and
the comparison.

    python experiments/fedrzo_compare_report.py --picks docs/results/fedrzo_compare_tuning
    python experiments/fedrzo_compare_report.py docs/results/fedrzo_compare > docs/results/fedrzo_compare/compare.md
    python experiments/fedrzo_compare_report.py --summary docs/results/fedrzo_compare \
        > docs/results/fedrzo_compare/summary.md

``--picks`` prints, per method, each step's mean of the last 10% of rounds over the tuning seeds and
the pick (the highest mean; ties: the smaller step). Without it: per width (hidden-units) and method,
on the reporting seeds, the test accuracy (%) as the mean of the last 10% of rounds, the paired
difference against FedRZO_nn and against x_0 alone (same seeds), and speed in the two units the
issue names: communication rounds to reach TARGET accuracy, and the clients' compute to get there
(the sum over rounds of the slowest client's compute, ``client_compute_max_s``: the round's critical
path; seconds on this machine, one core a client). A run that never reaches TARGET is counted as not
reaching it (k/n reached). The centralised first-order ceiling and x_0 alone are rows.
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from report_common import short  # a module beside this script

from zofl.stats import fmt_interval, interval, paired, run_figures
from zofl.study import study_runs

STEP = {"fedrzo-nn": "zo-lr", "fedavg": "local-lr", "fedprox": "local-lr", "fedmspp": "local-lr",
        "scaffnew": "local-lr", "centralised": "local-lr"}
ORDER = ("fedrzo-nn", "fedavg", "fedprox", "fedmspp", "scaffnew", "fedavg:relu-net")
CONTROLS = ("x0-only", "centralised")
TITLES = {"fedrzo-nn": "FedRZO_nn (ReLU, zeroth-order)", "fedavg": "FedAvg (softplus)",
          "fedprox": "FedProx (softplus)", "fedmspp": "FedMSPP (softplus)", "scaffnew": "Scaffnew (softplus)",
          "fedavg:relu-net": "FedAvg (ReLU, subgradients)"}
TARGET = 0.75


def label(strategy: str, task: str) -> str:
    """A line of the tables: a method by its strategy (FedRZO_nn on the ReLU network, a first-order method on the
    softplus one), a first-order method on the ReLU network and a control by strategy and network."""
    if strategy in CONTROLS or (strategy != "fedrzo-nn" and task == "relu-net"):
        return f"{strategy}:{task}"
    return strategy


def relu(s: str) -> bool:
    """Whether the line runs on the ReLU network."""
    return s == "fedrzo-nn" or s.endswith(":relu-net")


def picks(study: Path) -> None:
    rows = list(csv.DictReader(open(study / "results.csv")))
    by: dict = defaultdict(dict)
    for r in rows:
        s = label(r["strategy"], r["task"])
        if s not in ORDER:
            continue  # controls have no step to pick
        by[s].setdefault(float(r[STEP[r["strategy"]]]), []).append(100 * float(r["last10_test_acc"]))
    print(f"Picks on seeds {sorted({int(r['seed']) for r in rows})} (mean of the last 10% of rounds, %):\n")
    print("| method | step key | each step: mean +- 95% t (n) | pick |")
    print("|---|---|---|---|")
    for s in ORDER:
        if s not in by:
            continue
        steps = sorted(by[s])
        best = max(steps, key=lambda k: (interval(by[s][k])[0], -k))
        cells = [f"{k:g}: {fmt_interval(interval(by[s][k]))}" for k in steps]
        print(f"| {s} | {STEP[s.split(':')[0]]} | " + "; ".join(cells) + f" | **{best:g}** |")


def _reach(recs: list[dict]) -> tuple[int | None, float | None]:
    """(rounds, summed critical-path client compute in s) to the first round at TARGET, or (None, None)."""
    spent = 0.0
    for r in recs:
        spent += r.get("client_compute_max_s") or 0.0
        if r["round"] > 0 and r["test_acc"] >= TARGET:
            return r["round"], spent
    return None, None


def _fmt_reach(vals: list, digits: int) -> str:
    got = [v for v in vals if v is not None]
    if len(got) < len(vals):
        return f"{len(got)}/{len(vals)} reached"
    return fmt_interval(interval(got), digits=digits)


def _label(cfg: dict) -> str:
    return label(cfg["strategy"], cfg["task"])


def _title(line: str) -> str:
    s, _, task = line.partition(":")
    net = {"relu-net": "ReLU", "softplus-net": "softplus"}.get(task, task)
    controls = {"x0-only": f"*x_0 alone ({net})*", "centralised": f"*centralised SGD, ceiling ({net})*"}
    return controls.get(s) or TITLES.get(line, line)


def report(study: Path) -> None:
    runs: dict = defaultdict(lambda: defaultdict(dict))  # width -> label -> seed -> records
    for _, cfg, recs in study_runs(study):
        runs[int(cfg["hidden-units"])][_label(cfg)][cfg["seed"]] = recs
    p = print
    p("# FedRZO_nn against first-order FL methods (FedRZO paper, Sec. 5.1)\n")
    p(f"Written by `python experiments/fedrzo_compare_report.py {study}` from the runs of "
      "experiments/fedrzo_compare.toml (the steps picked on seeds 0-2 by experiments/fedrzo_compare_tuning.toml, "
      "reported here on other seeds). Test accuracy (%): mean of the last 10% of 200 rounds, mean +- the half-width "
      "of the 95% t interval (n); differences paired by seed (same split, same initial point); 'minus x_0 alone': "
      "against x_0 on the method's own network. Speed: communication rounds, and the clients' compute (s, the "
      f"slowest client per round, summed), to the first round at {100 * TARGET:g}% test accuracy.\n")
    for width in sorted(runs):
        by = runs[width]
        acc = {s: {seed: 100 * run_figures([r["test_acc"] for r in recs])["last10"] for seed, recs in d.items()}
               for s, d in by.items()}
        p(f"## N1 = {width} hidden units\n")
        p("| method | accuracy | minus FedRZO_nn | minus x_0 alone | rounds to target | client compute to target (s) "
          "| client compute per round (s) |")
        p("|---|---|---|---|---|---|---|")
        for s in (*ORDER, *(f"{c}:{t}" for c in CONTROLS for t in ("relu-net", "softplus-net"))):
            if s not in by:
                continue
            reach = [_reach(recs) for recs in by[s].values()]
            per_round = interval(sum(r.get("client_compute_max_s") or 0.0 for r in recs) / (len(recs) - 1)
                                 for recs in by[s].values())
            x0 = "x0-only:relu-net" if relu(s) else "x0-only:softplus-net"
            vs = [fmt_interval(paired(acc[s], acc[o])) if o in acc and s in ORDER and o != s else ""
                  for o in ("fedrzo-nn", x0)]
            clients = s in ORDER  # the controls have no clients: no client compute
            p(f"| {_title(s)} | {fmt_interval(interval(acc[s].values()))} | {vs[0]} | {vs[1]} | "
              f"{_fmt_reach([x[0] for x in reach], 1)} | {_fmt_reach([x[1] for x in reach], 2) if clients else ''} | "
              f"{fmt_interval(per_round, digits=3) if clients else ''} |")
        p("")


def summary(study: Path) -> None:
    """The one-screen table: per method and width, accuracy, minus FedRZO_nn, and rounds to TARGET."""
    runs: dict = defaultdict(lambda: defaultdict(dict))
    for _, cfg, recs in study_runs(study):
        runs[int(cfg["hidden-units"])][_label(cfg)][cfg["seed"]] = recs
    widths = sorted(runs)
    cols = [f"N1 = {w}: accuracy | N1 = {w}: minus FedRZO_nn | N1 = {w}: rounds to {100 * TARGET:g}%" for w in widths]
    print("| MNIST, m = 5, 200 rounds | " + " | ".join(cols) + " |")
    print("|---|" + "---|---|---|" * len(widths))
    for s in (*ORDER, *(f"{c}:{t}" for c in CONTROLS for t in ("relu-net", "softplus-net"))):
        cells = []
        for w in widths:
            by = runs[w]
            if s not in by:
                cells += ["", "", ""]
                continue
            acc = {k: {seed: 100 * run_figures([r["test_acc"] for r in recs])["last10"] for seed, recs in d.items()}
                   for k, d in by.items()}
            vs = short(paired(acc[s], acc["fedrzo-nn"])) if s in ORDER and s != "fedrzo-nn" else ""
            reach = _fmt_reach([_reach(r)[0] for r in by[s].values()], 1).split(" (n=")[0]  # n is in the text
            cells += [short(interval(acc[s].values())), vs, reach]
        if any(cells):
            print(f"| {_title(s)} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--picks", action="store_true", help="print the tuning grid's picks instead")
    ap.add_argument("--summary", action="store_true", help="print the one-screen table of docs/results/README.md")
    args = ap.parse_args()
    picks(args.study) if args.picks else summary(args.study) if args.summary else report(args.study)


if __name__ == "__main__":
    main()
