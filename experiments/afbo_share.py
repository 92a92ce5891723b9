"""How much of an AFBO - FedNest gap is the bilevel method and how much is asynchrony (issue 31, item 5).

For each setting of an AFBO figure's summary.json (afbo_plot.py), per seed:
  method gap   = AFBO - FedNest                        (test loss at the figure's time budget T)
  control gap  = AFBO(outer-lr 0) - FedNest(outer-lr 0) (the same engines and schedules, x frozen:
                 what asynchrony and the y steps alone give)
  bilevel part = method gap - control gap = (AFBO - its control) - (FedNest - its control)
each with its mean and 95% t interval over the seeds (paired: same seed = same split), and the
control gap's share of the method gap. Prints a markdown table.

    python experiments/afbo_share.py docs/results/afbo/regularization/summary.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from report_common import AFBO, CONTROL, FEDNEST  # a module beside this script

from zofl.stats import fmt_interval, interval


def per_seed(methods: dict, name: str, metric: str) -> dict[int, float]:
    m = methods[name]
    return dict(zip(m["seeds"], m[f"per_seed_{metric}_at_T"]))


def gaps(methods: dict, metric: str) -> dict[str, list[float]]:
    """Per-seed method gap, control gap and bilevel part of one setting."""
    a, f = per_seed(methods, AFBO, metric), per_seed(methods, FEDNEST, metric)
    ac, fc = per_seed(methods, AFBO + CONTROL, metric), per_seed(methods, FEDNEST + CONTROL, metric)
    seeds = sorted(set(a) & set(f) & set(ac) & set(fc))
    method = [a[s] - f[s] for s in seeds]
    control = [ac[s] - fc[s] for s in seeds]
    return {"method": method, "control": control, "bilevel": [m - c for m, c in zip(method, control)]}


def table(summary: dict, metric: str = "loss") -> str:
    rows = ["| setting | T (s) | AFBO - FedNest | their controls' gap (asynchrony, x frozen) | bilevel part "
            "(difference) | controls' share of the gap |", "|---|---|---|---|---|---|"]
    for setting in summary.values():
        if AFBO + CONTROL not in setting["methods"] or FEDNEST + CONTROL not in setting["methods"]:
            rows.append(f"| {setting['title']} | {setting['time_budget_s']:.1f} | no outer-lr = 0 control in this "
                        f"study: the gap cannot be split | | | |")
            continue
        g = gaps(setting["methods"], metric)
        m, c = interval(g["method"]), interval(g["control"])
        share = f"{100 * c[0] / m[0]:.0f}%" if m[0] else "n/a"
        rows.append(f"| {setting['title']} | {setting['time_budget_s']:.1f} | {fmt_interval(m, digits=3)} | "
                    f"{fmt_interval(c, digits=3)} | {fmt_interval(interval(g['bilevel']), digits=3)} | {share} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summaries", nargs="+", help="summary.json files written by afbo_plot.py figures")
    ap.add_argument("--metric", default="loss", choices=("loss", "acc"), help="test loss or accuracy at T")
    args = ap.parse_args(argv)
    for path in args.summaries:
        print(f"{Path(path)} (test {args.metric} at T; mean +- 95% t interval over seeds, paired by seed)\n")
        print(table(json.loads(Path(path).read_text()), args.metric) + "\n")


if __name__ == "__main__":
    main()
