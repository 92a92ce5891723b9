"""The ZO-HFL study and the baselines' step study (experiments/study_zohfl.toml) with seeds: per
setting, the test accuracy over seeds and the paired difference (same seeds) against the base
setting of its method: ZO-HFL's base (lambda 10, mu 1, batch 32, crn, 1 direction, x_0 pre-trained,
gamma 0.01) and, for each baseline, the default the study chose (local-lr 0.3 with the /sqrt(r+1)
schedule, prox-mu 0.01).

    python experiments/study_report.py docs/results/study > docs/results/study/seeds.md

Accuracy: mean of the last 10% of rounds and the final round (%), mean +- the half-width of the 95%
t interval (n seeds). A difference whose interval contains 0 is below the noise at this n.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import tomllib

from zofl.compare import cell_id
from zofl.stats import excludes_zero, fmt_interval, interval, paired

HERE = Path(__file__).resolve().parent
BASELINE_DEFAULT = {"local-lr": 0.3, "local-lr-schedule": "round-sqrt"}


def label(setting: dict) -> str:
    rest = {k: v for k, v in setting.items() if k != "strategy"}
    return setting["strategy"] + (": " + ", ".join(f"{k} {v}" for k, v in rest.items()) if rest else ": base")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--grid", type=Path, default=HERE / "study_zohfl.toml")
    args = ap.parse_args()
    spec = tomllib.loads(args.grid.read_text())
    rows = {r["cell"]: r for r in csv.DictReader(open(args.results / "results.csv"))}
    settings = spec["grid"]["settings"]
    by_setting: dict[int, dict[str, dict[int, float]]] = {}
    for i, setting in enumerate(settings):
        for seed in spec["grid"]["seed"]:  # each cell as expand_grid builds it
            cell = {**spec["fixed"], "seed": seed, **setting}
            cell.update(spec.get("strategy", {}).get(cell["strategy"], {}))
            r = rows.get(cell_id(cell))
            if r is None:
                continue
            d = by_setting.setdefault(i, {})
            for metric in ("last10", "final", "x0"):
                d.setdefault(metric, {})[seed] = float(r[f"{metric}_test_acc"])

    def base_of(s: dict) -> int:
        if s["strategy"] == "zohfl":
            return 0
        want = {"strategy": s["strategy"], **BASELINE_DEFAULT}
        return next(j for j, t in enumerate(settings) if t == want)

    p = print
    p("# The ZO-HFL study and the baselines' steps, seeds 0-2\n")
    p(f"Written by `python experiments/study_report.py {args.results}` from the runs of "
      f"`{args.grid.relative_to(HERE.parent) if args.grid.is_relative_to(HERE.parent) else args.grid}` "
      "(Fashion-MNIST, m = 10, alpha 1, beta 0.5, tau 20, R = 200, the in-process engine). Test accuracy (%): "
      "mean +- the half-width of the 95% t interval (n seeds). 'vs base' is paired by seed (same split, x_0, "
      "sampling and minibatches) against the method's base: ZO-HFL's base row, or the baseline's default "
      "(local-lr 0.3, /sqrt(r+1) schedule, prox-mu 0.01). **Bold**: the interval excludes 0 (an effect at "
      "this n); otherwise the difference is below the noise.\n")
    x0 = by_setting.get(0, {}).get("x0", {})
    p("x_0 of the base setting (one SGD epoch on the server's 30%, batch 32), per seed: "
      + ", ".join(f"seed {s}: {100 * v:.2f}" for s, v in sorted(x0.items()))
      + " (x0 = zeros: about 10; batch-size also changes x_0's epoch). The seeds' x_0 differ by several "
      "points, which is why the unpaired intervals are wide and the paired differences are the reading.\n")
    p("| setting | last 10% | final | last 10% vs base | final vs base |")
    p("|---|---|---|---|---|")
    for i, s in enumerate(settings):
        d = by_setting.get(i)
        if not d:
            p(f"| {label(s)} | pending | | | |")
            continue
        b = by_setting.get(base_of(s), {})
        cells = [fmt_interval(interval(d[m].values()), 100) for m in ("last10", "final")]
        diffs = []
        for m in ("last10", "final"):
            if base_of(s) == i:
                diffs.append("(base)")
                continue
            t = paired(d[m], b.get(m, {}))
            text = fmt_interval(t, 100)
            diffs.append(f"**{text}**" if excludes_zero(t) else text)
        p(f"| {label(s)} | {' | '.join(cells)} | {' | '.join(diffs)} |")
    p("")


if __name__ == "__main__":
    main()
