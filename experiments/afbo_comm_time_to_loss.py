"""Time to a target test loss, from the per-round records of a study (rounds.parquet, written by
``experiments/afbo_plot.py figures ... --records``), so that a reader can recompute it from the
committed file alone.

Per setting (as afbo_plot.py groups them) the budget T is the smallest final clock of its cells (the
same cut as the figures). Also the mean test loss at 0.5T, 0.8T and T (is a method past its
transient?). Per cell: the first simulated time (clock_s) at which a record has
test_loss <= threshold and clock_s <= T (not reached: no value). Per method: mean +- 95% t interval
over the seeds that reached it (and how many did); AFBO - FedNest and each method - its outer-lr = 0
control paired by seed over the seeds where both reached it.

    python experiments/afbo_comm_time_to_loss.py docs/results/afbo/comm/latency0/rounds.parquet --thresholds 0.35,0.3
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from report_common import AFBO, CONTROL, FEDNEST, curves, hold  # a module beside this script

from zofl.stats import fmt_interval, interval, paired


def first_time(recs: list[tuple[float, float]], thr: float, T: float) -> float:
    return next((t for t, loss in recs if loss <= thr and t <= T), math.nan)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--thresholds", default="0.35,0.3", help="test-loss targets")
    args = ap.parse_args(argv)
    thrs = [float(t) for t in args.thresholds.split(",")]
    for path in args.records:
        for setting, methods in curves(path).items():
            T = min(recs[-1][0] for seeds in methods.values() for recs in seeds.values())
            print(f"{path} {setting}: T = {T:.2f} simulated s; time (s) to test loss <= threshold, "
                  f"mean +- 95% t interval over the seeds that reached it\n")
            print("| method | " + " | ".join(f"time to loss <= {t:g} (s)" for t in thrs) + " |")
            print("|---|" + "---|" * len(thrs))
            times = {m: {t: {s: first_time(r, t, T) for s, r in seeds.items()} for t in thrs}
                     for m, seeds in methods.items()}
            for m in sorted(times, key=lambda m: (m.endswith(CONTROL), m)):
                cells = []
                for t in thrs:
                    v = times[m][t]
                    reached = [x for x in v.values() if not math.isnan(x)]
                    cells.append(f"{fmt_interval(interval(reached), digits=2) or 'not reached'} "
                                 f"[{len(reached)}/{len(v)} seeds]")
                print(f"| {m} | " + " | ".join(cells) + " |")
            print("\nPast the transient? Test loss (mean over seeds, zero-order hold) at 0.5T, 0.8T and T, and its "
                  "relative fall over the last fifth [0.8T, T]:\n")
            print("| method | loss at 0.5T | at 0.8T | at T | fall over [0.8T, T] |")
            print("|---|---|---|---|---|")
            for m in sorted(methods, key=lambda m: (m.endswith(CONTROL), m)):
                at = [sum(hold(r, f * T) for r in methods[m].values()) / len(methods[m]) for f in (0.5, 0.8, 1.0)]
                print(f"| {m} | {at[0]:.4f} | {at[1]:.4f} | {at[2]:.4f} | {100 * (at[1] - at[2]) / at[1]:.1f}% |")
            pairs = [(AFBO, FEDNEST), (AFBO, AFBO + CONTROL), (FEDNEST, FEDNEST + CONTROL),
                     (AFBO + CONTROL, FEDNEST + CONTROL)]
            print()
            for a, b in pairs:
                if a in times and b in times:
                    txt = []
                    for t in thrs:
                        A = {s: x for s, x in times[a][t].items() if not math.isnan(x)}
                        B = {s: x for s, x in times[b][t].items() if not math.isnan(x)}
                        txt.append(f"loss <= {t:g}: {fmt_interval(paired(A, B), digits=2) or 'no common seed'}")
                    print(f"- paired {a} - {b} (s): " + "; ".join(txt))
            print()


if __name__ == "__main__":
    main()
