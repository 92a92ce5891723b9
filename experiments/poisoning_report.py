"""The poisoning benchmark's tables (experiments/poisoning.toml, poisoning_clip.toml, poisoning_more.toml): per method,
final test accuracy (%) with its 95% t interval over seeds, for each threat (attack, number of
hostile clients of 10) and each aggregation rule; written to DIR/poisoning.md and printed.

    python experiments/poisoning_report.py docs/results/poisoning docs/results/poisoning_clip \
        docs/results/poisoning_more
"""
from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

from zofl.stats import fmt_interval, interval, paired

METHODS = ["zohfl", "fedavg", "fedprox", "scaffold", "fedrzo-nn", "fednest", "afbo", "fedbuff"]
TITLES = {"zohfl": "ZO-HFL", "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD",
          "fedrzo-nn": "FedRZO_nn (relu-net)", "fednest": "FedNest (hyper-cleaning)",
          "afbo": "AFBO (hyper-cleaning, asynchronous)", "fedbuff": "FedBuff (asynchronous, buffer-size 5)"}
THREATS = [("none", "")] + [(a, h) for a in ("large", "sign-flip", "scale") for h in ("0", "0,1", "0,1,2")]


def defence(cfg: dict) -> str:
    if float(cfg.get("coef-clip", 0.0)) > 0:
        return f"coef-clip {float(cfg['coef-clip']):g}"
    agg = cfg.get("aggregation", "mean")
    return f"trimmed-mean {float(cfg.get('trim-fraction', 0.2)):g}" if agg == "trimmed-mean" else agg


def cell(text: str, diff: tuple[float, float, int]) -> str:
    """final accuracy, and its paired difference from the same rule without an attack (same seeds)."""
    return text if not diff[2] else f"{text}; {fmt_interval(diff, 100, 1).replace(' (n=3)', '')}"


def main(dirs: list[str]) -> int:
    acc: dict[tuple[str, str, str, str], dict[int, float]] = defaultdict(dict)
    x0: dict[str, dict[int, float]] = defaultdict(dict)
    for d in dirs:
        with open(Path(d) / "results.csv") as f:
            for row in csv.DictReader(f):  # the cell's own config.json: keys a grid does not vary are not columns
                cfg = json.loads((Path(d) / "cells" / row["cell"] / "config.json").read_text())
                threat = (cfg.get("attack", "none"), cfg.get("hostile-clients", ""))
                seed = int(cfg.get("seed", 0))
                acc[(cfg["strategy"], defence(cfg), *threat)][seed] = float(row["final_test_acc"])
                x0[cfg["strategy"]][seed] = float(row["x0_test_acc"])
    lines = ["# Poisoning benchmark: final test accuracy (%) with hostile clients", "",
             "Written by `python experiments/poisoning_report.py " + " ".join(dirs) + "` from the runs of "
             "`experiments/poisoning.toml`, `experiments/poisoning_clip.toml` and `experiments/poisoning_more.toml` "
             "(digits, 10 clients all sampled every round, 50 rounds or, asynchronous, 50 server updates, seeds 0-2; "
             "mean +- 95% t interval, n seeds). Threats: `large` = every reply "
             "value +-0.99 reply-max-abs, `sign-flip` = the honest update negated, `scale` = the honest update x 10; "
             "h = the number of hostile clients of 10. Rules: the papers' `mean`, the coordinate `median`, the "
             "coordinate `trimmed-mean` dropping 30% at each end, and for ZO-HFL `coef-clip 3` (two-point "
             "coefficients clipped at 3 x the round's median magnitude, with the mean). Each cell: final accuracy "
             "over seeds; after `;` its paired difference from the same rule with no attack (same seeds, "
             "+- 95% t interval; coef-clip against the plain mean with no attack). Intervals over seeds are "
             "wide since x_0 itself varies with the seed's split; the paired differences are the readings.", ""]
    for m in METHODS:
        rules = sorted({k[1] for k in acc if k[0] == m}, key=lambda r: (r != "mean", r))
        if not rules:
            continue
        lines += [f"## {TITLES[m]} (x_0: {fmt_interval(interval(x0[m].values()), 100, 1)})", "",
                  "| threat | h | " + " | ".join(rules) + " |", "|---|---|" + "---|" * len(rules)]
        for attack, hostile in THREATS:
            h = len([t for t in hostile.split(",") if t])
            if not any((m, r, attack, hostile) in acc for r in rules):
                continue  # a threat this method's grid does not have
            row = []
            for r in rules:
                got = acc.get((m, r, attack, hostile), {})
                # the same rule without an attack (coef-clip has no clean run of its own: the mean's)
                clean = acc.get((m, "mean" if r.startswith("coef") else r, "none", ""), {})
                diff = paired(got, clean) if attack != "none" else (0.0, 0.0, 0)
                row.append(cell(fmt_interval(interval(got.values()), 100, 1), diff) if got else "-")
            lines.append(f"| {attack} | {h} | " + " | ".join(row) + " |")
        lines.append("")
    text = "\n".join(lines)
    (Path(dirs[0]) / "poisoning.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
