"""Pick Table I's step sizes per (dataset, setting, method) from the tuning grid (issue 11, item 3).

    python experiments/table1_tuning_report.py docs/results/table1_tuning > docs/results/table1_tuning/picks.md
    python experiments/table1_tuning_report.py docs/results/table1_tuning --toml experiments/table1_tuned.toml

Reads RESULTS_DIR/results.csv (experiments/table1_tuning.toml: every method gets the same budget of 4
configurations per dataset and setting, seed 100, R = 200) and, for each (dataset, alpha, beta,
method) whose 4 configurations have all finished, picks the one with the best mean test accuracy over
the last 10% of rounds (``last10_test_acc``; ties: the first in the grid's order). A group not complete
is listed as pending and gets no pick. With ``--toml`` it writes the grid of Table I with the picks:
one dict per picked cell, times seeds 0-2, R = 500 (the grid's other keys as in table1_tuning.toml).

The selection uses the test set of a seed (100) that is not one of the table's seeds: a held-out
validation split would be cleaner; the same protocol is used for every method.
"""
from __future__ import annotations

import argparse
import csv
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEP_KEYS = {"zohfl": ("gamma",), "fedavg": ("local-lr", "server-lr"), "fedprox": ("local-lr", "server-lr"),
             "scaffold": ("local-lr", "server-lr")}
NAMES = {"zohfl": "ZO-HFL", "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD"}


def _key(r: dict) -> tuple:
    return r["dataset"], float(r["alpha"]), float(r["beta"]), r["strategy"]


def _steps(r: dict) -> tuple:
    return tuple(float(r[k]) for k in STEP_KEYS[r["strategy"]])


def picks(rows: list[dict], per_group: dict[str, int]) -> tuple[dict[tuple, dict], dict[tuple, list[dict]]]:
    """(group -> picked row for the groups with all ``per_group[method]`` configurations, group -> its rows)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), []).append(r)
    best = {g: max(rs, key=lambda r: float(r["last10_test_acc"])) for g, rs in groups.items()
            if len({_steps(r) for r in rs}) >= per_group[g[3]]}
    return best, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--grid", type=Path, default=HERE / "table1_tuning.toml")
    ap.add_argument("--toml", type=Path, help="write Table I's grid with the picked steps here")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=500)
    args = ap.parse_args()
    spec = tomllib.loads(args.grid.read_text())
    methods = spec["grid"]["method"]
    per_group = {s: sum(m["strategy"] == s for m in methods) for s in NAMES}
    rows = [r for r in csv.DictReader(open(args.results / "results.csv")) if r["strategy"] in NAMES]
    best, groups = picks(rows, per_group)
    datasets = [d["dataset"] for d in spec["grid"]["data"]]
    settings = [(float(s["alpha"]), float(s["beta"])) for s in spec["grid"]["settings"]]
    p = print
    p("# Table I step sizes, tuned per dataset and setting\n")
    grid = args.grid.relative_to(HERE.parent) if args.grid.is_relative_to(HERE.parent) else args.grid
    tuned = [s for s in NAMES if per_group[s]]  # the methods this grid tunes
    p(f"Seed 100, R = {spec['fixed']['num-rounds']}, the same {per_group[tuned[0]]} configurations per method "
      f"({grid}). Each entry: test accuracy (%), mean of the last 10% of rounds; "
      "**bold** = the pick (best last-10% mean). One seed: the pick is a choice of step, not a result.\n")
    total = 0
    for ds in datasets:
        for a, b in settings:
            p(f"## {ds}, (alpha, beta) = ({a:g}, {int(b * 100)}%)\n")
            p("| method | steps | last 10% | final | best | x_0 |")
            p("|---|---|---|---|---|---|")
            for s in tuned:
                rs = groups.get((ds, a, b, s), [])
                pick = best.get((ds, a, b, s))
                total += pick is not None
                for r in sorted(rs, key=_steps):
                    steps = ", ".join(f"{k} {float(r[k]):g}" for k in STEP_KEYS[s])
                    last = f"{100 * float(r['last10_test_acc']):.2f}"
                    if r is pick:
                        last = f"**{last}**"
                    p(f"| {NAMES[s]} | {steps} | {last} | {100 * float(r['final_test_acc']):.2f} | "
                      f"{100 * float(r['best_test_acc']):.2f} | {100 * float(r['x0_test_acc']):.2f} |")
                if pick is None:
                    p(f"| {NAMES[s]} | pending ({len(rs)} of {per_group[s]} finished) | | | | |")
            p("")
    p(f"{total} of {len(datasets) * len(settings) * len(tuned)} groups picked.\n")
    p("```bash")
    same_grid = "" if args.grid == HERE / "table1_tuning.toml" else f" --grid {grid}"
    p(f"python -m zofl.compare {grid} --out {args.results} --via inprocess --set 'data-dir=\"/abs/path/to/npz\"'")
    p(f"python experiments/table1_tuning_report.py {args.results}{same_grid} > {args.results}/picks.md")
    p("```")
    if args.toml:
        data = {d["dataset"]: d for d in spec["grid"]["data"]}
        cells = []
        for (ds, a, b, s), r in sorted(best.items(), key=lambda kv: (kv[0][2], list(NAMES).index(kv[0][3]), kv[0][0])):
            cell = {**data[ds], "alpha": a, "beta": b, "strategy": s,
                    **{k: float(r[k]) for k in STEP_KEYS[s]}}
            cells.append("  {" + ", ".join(f"{k} = {_toml(v)}" for k, v in cell.items()) + "},")
        seeds = [int(x) for x in args.seeds.split(",")]
        fixed = {**spec["fixed"], "num-rounds": args.rounds}
        fixed.pop("seed", None)
        text = [f"# Table I with the steps picked by experiments/table1_tuning_report.py from {args.results}",
                f"# ({len(cells)} of the groups); written by that script, do not edit by hand.",
                f"#   python -m zofl.compare {args.toml} --out docs/results/{args.toml.stem} --via inprocess "
                "--set 'data-dir=\"/abs/path/to/npz\"'",
                "[fixed]", *[f"{k} = {_toml(v)}" for k, v in fixed.items()], "", "[grid]", "cell = [", *cells, "]",
                f"seed = {seeds}", "", "[report]", 'columns = ["dataset", "alpha", "beta"]', ""]
        args.toml.write_text("\n".join(text))
        print(f"wrote {args.toml}: {len(cells)} cells x {len(seeds)} seeds", file=sys.stderr)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


if __name__ == "__main__":
    main()
