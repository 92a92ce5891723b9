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
import tomllib
from pathlib import Path

from zofl.compare import cell_id
from zofl.stats import excludes_zero, fmt_interval, interval, paired

HERE = Path(__file__).resolve().parent
BASELINE_DEFAULT = {"local-lr": 0.3, "local-lr-schedule": "round-sqrt"}


def label(setting: dict) -> str:
    rest = {k: v for k, v in setting.items() if k != "strategy"}
    return setting["strategy"] + (": " + ", ".join(f"{k} {v}" for k, v in rest.items()) if rest else ": base")


def effect(t: tuple[float, float, int]) -> str:
    """A paired difference in points, bold when its interval excludes 0."""
    text = fmt_interval(t, 100)
    return f"**{text}**" if excludes_zero(t) else text


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

    def base_of(s: dict) -> int | None:
        if s["strategy"] == "zohfl":
            return 0
        want = {"strategy": s["strategy"], **BASELINE_DEFAULT}
        return next((j for j, t in enumerate(settings) if t == want), None)

    def control_of(s: dict) -> int | None:
        """The f1-only setting with this ZO-HFL setting's gamma and start."""
        if s["strategy"] != "zohfl":
            return None
        want = {k: s[k] for k in ("gamma", "x0") if k in s}
        return next((j for j, t in enumerate(settings) if t == {"strategy": "f1-only", **want}), None)

    def diff(i: int, j: int | None, metric: str, same_x0: bool = False) -> str:
        if j is None:
            return ""
        if j == i:
            return "(base)"
        a, b = by_setting.get(i, {}), by_setting.get(j, {})
        seeds = [s for s in a.get(metric, {}) if s in b.get(metric, {})
                 and (not same_x0 or a["x0"][s] == b["x0"][s])]
        if not seeds:
            return "(another x_0)" if same_x0 and a and b else ""
        return effect(paired({s: a[metric][s] for s in seeds}, b[metric]))

    p = print
    p("# The ZO-HFL study and the baselines' steps, seeds 0-2\n")
    p(f"Written by `python experiments/study_report.py {args.results}` from the runs of "
      f"`{args.grid.relative_to(HERE.parent) if args.grid.is_relative_to(HERE.parent) else args.grid}` "
      "(Fashion-MNIST, m = 10, alpha 1, beta 0.5, tau 20, R = 200, the in-process engine). Test accuracy (%): "
      "mean +- the half-width of the 95% t interval (n seeds). 'vs base' is paired by seed (same split, x_0, "
      "sampling and minibatches) against the method's base: ZO-HFL's base row, or the baseline's default "
      "(local-lr 0.3, /sqrt(r+1) schedule, prox-mu 0.01); 'last 10% - x_0' is what the run moved from its own "
      "start; 'vs f1-only' pairs ZO-HFL with the control that takes the same server steps on f1 from the same x_0 "
      "without the clients' term (same gamma and start; rows whose x_0 differs from the control's, the batch-size "
      "rows, are not paired). **Bold**: the interval excludes 0 (an effect at "
      "this n); otherwise the difference is below the noise.\n")
    x0 = by_setting.get(0, {}).get("x0", {})
    p("x_0 of the base setting (one SGD epoch on the server's 30%, batch 32), per seed: "
      + ", ".join(f"seed {s}: {100 * v:.2f}" for s, v in sorted(x0.items()))
      + " (x0 = zeros: about 10; batch-size also changes x_0's epoch). The seeds' x_0 differ by several "
      "points, which is why the unpaired intervals are wide and the paired differences are the reading.\n")
    p("| setting | last 10% | final | last 10% - x_0 | last 10% vs base | final vs base | last 10% vs f1-only |")
    p("|---|---|---|---|---|---|---|")
    for i, s in enumerate(settings):
        d = by_setting.get(i)
        if not d:
            p(f"| {label(s)} | pending | | | | | |")
            continue
        cells = [fmt_interval(interval(d[m].values()), 100) for m in ("last10", "final")]
        cells += [effect(paired(d["last10"], d["x0"])), diff(i, base_of(s), "last10"), diff(i, base_of(s), "final"),
                  diff(i, control_of(s), "last10", same_x0=True)]
        p(f"| {label(s)} | {' | '.join(cells)} |")
    p("")


if __name__ == "__main__":
    main()
