"""ZO-HFL's variants (issue 11, item 6; ours, beyond the paper) against their controls, from the runs of
experiments/zohfl_variants.toml: per variant and start (x_0 pre-trained or zeros), the mean of the
last 10% of rounds over seeds, and paired differences (same seeds) against the f1-only control with
the same server step gamma (the server's own steps grow with gamma too), against the best f1-only
control of that start (the gamma with the highest mean: a variant's gain over its own gamma's control
can be the control's loss at that gamma), server-only SGD, FedAvg and SCAFFOLD; x_0 alone and the
centralised ceiling as rows; and the client work (local SGD steps per
sampled client per round). Written to DIR/variants.md and printed.

    python experiments/zohfl_variants_report.py docs/results/zohfl_variants
    python experiments/zohfl_variants_report.py docs/results/zohfl_variants_heldout --best-f1 pretrained=0.1,zeros=1.0

``--best-f1`` names the best f1-only's gamma per start instead of picking it on the seeds reported
(the held-out seeds of experiments/zohfl_variants_heldout.toml: the picks were made on seeds 0-4).
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from zofl.stats import fmt_interval, interval, paired

VARIANTS = [  # (label, keys the row must have)
    ("ZO-HFL (the paper: two-point, 1 direction, gamma 0.01)",
     {"strategy": "zohfl", "estimator": "two-point", "directions": "1", "gamma": "0.01"}),
    ("(a) 4 orthonormal directions, gamma 0.01",
     {"strategy": "zohfl", "estimator": "two-point", "directions": "4", "gamma": "0.01"}),
    ("(b) envelope estimate, gamma 0.01", {"strategy": "zohfl", "estimator": "envelope", "gamma": "0.01"}),
    ("(b+c) envelope estimate, gamma 0.1", {"strategy": "zohfl", "estimator": "envelope", "gamma": "0.1"}),
    ("(b+c) envelope estimate, gamma 1", {"strategy": "zohfl", "estimator": "envelope", "gamma": "1.0"}),
    ("(b+c) envelope estimate, gamma 3", {"strategy": "zohfl", "estimator": "envelope", "gamma": "3.0"}),
    ("(b+c) envelope estimate, gamma 10", {"strategy": "zohfl", "estimator": "envelope", "gamma": "10.0"}),
    ("(a+c) 4 orthonormal directions, gamma 0.1",
     {"strategy": "zohfl", "estimator": "two-point", "directions": "4", "gamma": "0.1"}),
    ("(a+c) 4 orthonormal directions, gamma 1",
     {"strategy": "zohfl", "estimator": "two-point", "directions": "4", "gamma": "1.0"}),
]
CONTROLS = ("x0-only", "server-sgd", "centralised", "fedavg", "scaffold")
ROUNDS, SAMPLED = 200, 5  # R and beta m of the grid


def main(out: str, best_f1: dict[str, float] | None = None) -> int:
    acc: dict[tuple, dict[int, float]] = defaultdict(dict)
    steps: dict[tuple, list[float]] = defaultdict(list)
    rows = list(csv.DictReader(open(Path(out) / "results.csv")))

    def key(row, label):
        return (label, row["x0"])

    for row in rows:
        seed, last10 = int(row["seed"]), float(row["last10_test_acc"])
        for label, want in VARIANTS:
            if all(row.get(k) == v for k, v in want.items()):
                acc[key(row, label)][seed] = last10
                steps[key(row, label)].append(int(row["local_steps"]) / (ROUNDS * SAMPLED))
        if row["strategy"] in ("f1-only", *CONTROLS):
            label = row["strategy"] + (f" gamma {float(row['gamma']):g}" if row["strategy"] == "f1-only" else "")
            acc[key(row, label)][seed] = last10
            steps[key(row, label)].append(int(row["local_steps"]) / (ROUNDS * SAMPLED))
    lines = ["# ZO-HFL variants against their controls (ours, beyond the paper)", "",
             f"Written by `python experiments/zohfl_variants_report.py {out}"
             + (" --best-f1 " + ",".join(f"{k}={v:g}" for k, v in best_f1.items()) if best_f1 else "")
             + f"` from the runs of `experiments/{Path(out).name}.toml` "
             "(Fashion-MNIST, alpha 1, beta 0.5, m = 10, tau = 20, R = 200, "
             f"seeds {', '.join(map(str, sorted({int(r['seed']) for r in rows})))}, the in-process engine). "
             "Test accuracy (%), mean of the last 10% of rounds: mean +- the "
             "half-width of the 95% t interval (n seeds); differences are paired by seed (same split, sampling, "
             "directions and minibatches). 'vs f1-only' uses the f1-only control with the variant's own gamma; "
             + ("'vs the best f1-only' the f1-only control of the same x_0 at the gamma picked on seeds 0-4 "
                "(named in the section: held-out seeds). " if best_f1 else
                "'vs the best f1-only' the f1-only control of the same x_0 whose gamma has the highest mean "
                "(named in the section). ")
             + "server-sgd and centralised: first-order SGD on the server's 30% and on all "
             "training data, at the steps picked for Fashion-MNIST (0.03, 0.1). Steps: local SGD steps per sampled "
             "client per round (mean over runs; the SGD controls' steps are the server's, not a client's).", ""]
    for x0 in ("pretrained", "zeros"):
        f1 = {label: a for (label, start), a in acc.items() if start == x0 and label.startswith("f1-only gamma ")}
        if best_f1 and x0 in best_f1:
            best = f"f1-only gamma {best_f1[x0]:g}"
        else:
            best = max(f1, key=lambda label: interval(f1[label].values())[0], default=None)
        lines += [f"## x_0 = {x0}", ""]
        if best:
            how = "picked on seeds 0-4" if best_f1 else "the highest mean on these seeds"
            lines += [f"The best f1-only ({how}): {best} ({fmt_interval(interval(f1[best].values()), 100, 2)}).", ""]
        lines += ["| variant | accuracy | vs f1-only (same gamma) | vs the best f1-only | vs server SGD | vs FedAvg "
                  "| vs SCAFFOLD | steps |", "|---|---|---|---|---|---|---|---|"]
        for label, want in VARIANTS:
            a = acc.get((label, x0), {})
            if not a:
                continue
            ctrl = acc.get((f"f1-only gamma {float(want['gamma']):g}", x0), {})
            cells = [fmt_interval(interval(a.values()), 100, 2)]
            for b in (ctrl, f1.get(best, {}), acc.get(("server-sgd", x0), {}), acc.get(("fedavg", x0), {}),
                      acc.get(("scaffold", x0), {})):
                cells.append(fmt_interval(paired(a, b), 100, 2) if b else "-")
            st = steps[(label, x0)]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {sum(st) / len(st):.0f} |")
        for label in (*sorted(f1, key=lambda label: float(label.split()[-1])), *CONTROLS):
            a = acc.get((label, x0), {})
            if a:
                st = steps[(label, x0)]
                sgd = acc.get(("server-sgd", x0), {})
                vs_sgd = fmt_interval(paired(a, sgd), 100, 2) if sgd and label in ("fedavg", "scaffold") else ""
                lines.append(f"| {label} (control / baseline) | {fmt_interval(interval(a.values()), 100, 2)} "
                             f"| | | {vs_sgd} | | | {sum(st) / len(st):.0f} |")
        env = {float(want["gamma"]): acc.get((label, x0), {}) for label, want in VARIANTS
               if want.get("estimator") == "envelope"}
        if env.get(1.0) and env.get(0.1):
            lines += ["", "The envelope estimate at gamma 1 minus its other gammas (paired): " + ", ".join(
                f"gamma {g:g}: {fmt_interval(paired(env[1.0], env[g]), 100, 2)}"
                for g in sorted(env) if g != 1.0 and env[g])
                + "."]
        lines.append("")
    text = "\n".join(lines)
    (Path(out) / "variants.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the grid's results folder (results.csv)")
    ap.add_argument("--best-f1", default="", help="X0=GAMMA,...: the best f1-only's gamma per start, picked elsewhere")
    args = ap.parse_args()
    picks = dict(kv.split("=") for kv in args.best_f1.split(",") if kv)
    raise SystemExit(main(args.out, {k: float(v) for k, v in picks.items()} or None))
