"""Time to a target test accuracy on each run's whole simulated clock (not cut at a common budget), from an
AFBO study's per-round records (afbo_plot.py --records), per method: mean +- 95% t interval over seeds,
and the ratio of each method's time to AFBO's (``--reference``; the first method in name order if absent),
paired by seed.

    python experiments/afbo_time_to_target.py docs/results/afbo_cleaning/stragglers/rounds.parquet --target 0.88
"""
from __future__ import annotations

import argparse

from report_common import curves  # a module beside this script

from zofl.stats import fmt_interval, interval


def ci(v) -> str:
    return fmt_interval(interval(v)) or "-"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", help="rounds.parquet of afbo_plot.py figures --records")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--reference", default="AFBO (async)", help="the method the ratios divide by")
    a = ap.parse_args(argv)
    for setting, methods in curves(a.records, "test_acc").items():
        # method -> seed -> the clock time its test accuracy first reached the target (never: no entry)
        first = {m: {s: t for s, recs in sorted(runs.items())
                     if (t := next((c for c, acc in recs if acc >= a.target), None)) is not None}
                 for m, runs in methods.items()}
        print(f"### {setting}: time (simulated s) to test accuracy >= {a.target:g} on the run's whole clock\n")
        names = sorted(methods)
        base = a.reference if a.reference in methods else names[0]
        print(f"| method | reached | time (s) | ratio to {base} (paired by seed) |\n|---|---|---|---|")
        for m in names:
            ratio = [t / first[base][s] for s, t in first[m].items() if s in first[base]]
            print(f"| {m} | {len(first[m])}/{len(methods[m])} | {ci(list(first[m].values()))} | "
                  f"{ci(ratio) if m != base else '1'} |")
        print()


if __name__ == "__main__":
    main()
