"""afbo-global (ours) next to AFBO and FedNest on digits hyper-cleaning: 3 seeds, about the same simulated
time, simulated clock, in-process engine, each method also with its outer-lr = 0 control (x frozen: the
noisy labels, the same lower-level work). Writes results.csv (one row per run), table.md (mean and 95% t
interval per method) and rounds.parquet (every run's per-round records and run-config, packed as a study's:
zofl.packed; `pandas.read_parquet`). Runs go to --runs
(outside git).

    python experiments/afbo_global.py --runs /tmp/afbo-global-runs
    python experiments/afbo_global.py --runs /tmp/r --out /tmp/o --seeds 0 1 --outer-rounds 1   # the smoke test's
"""
from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from zofl.core.checkpoint import load_checkpoint
from zofl.inprocess import run_inprocess
from zofl.packed import write_packed
from zofl.results import read_rounds
from zofl.setup import prepare
from zofl.stats import interval
from zofl.tasks.hypergrad import _cleaning_arrays, ce_loss

HERE = Path(__file__).resolve().parent.parent / "docs" / "results" / "afbo_global"  # where it writes
# outer rounds per run: each method's count fills about the same simulated time (3.05-3.1 s; without
# speed differences a method's clock per outer round is fixed: afbo 0.17 s, afbo-global 0.145 s, fednest 0.31 s)
OUTER = {"afbo": 18, "afbo-global": 21, "fednest": 10}
COMMON = {"task": "hyper-cleaning", "dataset": "digits", "num-clients": 10, "alpha": 0.5, "server-fraction": 0.0,
          "local-steps": 5, "lower-lr": 0.5, "inner-rounds": 5, "neumann-steps": "5", "lipschitz-g": 20.0,
          "outer-lr": 1e5, "inner-lr": 0.5, "buffer-size": 2}


def methods(outer: dict[str, int]) -> dict[str, dict]:
    """Each method's keys: server steps (async) or communication rounds (fednest) for its outer rounds."""
    return {
        "afbo": {"strategy": "afbo", "engine": "async", "num-rounds": outer["afbo"] * (5 + 1)},
        "afbo-global": {"strategy": "afbo-global", "engine": "async", "num-rounds": outer["afbo-global"] * (5 + 5 + 1)},
        "fednest": {"strategy": "fednest", "beta": 1.0, "num-rounds": outer["fednest"]},
    }


SEEDS = (0, 1, 2)
FIELDS = ("method", "seed", "outer_rounds", "clock_s", "upper_objective", "test_loss", "test_acc", "weight_clean",
          "weight_corrupted", "wall_s")


def upper_objective(cfg: dict, y: np.ndarray) -> float:
    """F = (1/m) sum_i f_i(y): the mean over clients of the clean-validation cross-entropy at the final y."""
    c, _, spec = prepare(cfg)
    out = []
    for i in range(c.num_clients):
        _, _, _, u_val, val_labels, C = _cleaning_arrays(spec, i, c.holdout_fraction, c.corruption)
        out.append(float(np.mean(ce_loss(y.reshape(-1, C), u_val, val_labels))))
    return float(np.mean(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="/tmp/afbo-global-runs")
    ap.add_argument("--out", type=Path, default=HERE, help="where results.csv, rounds.parquet, table.md go")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--outer-rounds", type=int, default=0, help="> 0: every method's outer rounds (smoke runs)")
    args = ap.parse_args()
    outer = {k: args.outer_rounds for k in OUTER} if args.outer_rounds > 0 else OUTER
    seeds = tuple(args.seeds)
    rows, rounds = [], []
    arms = {**{n: (e, COMMON["outer-lr"]) for n, e in methods(outer).items()},
            **{f"{n} control": (e, 0.0) for n, e in methods(outer).items()}}
    for seed in seeds:
        for name, (extra, lr) in arms.items():
            cfg = {**COMMON, **extra, "outer-lr": lr, "seed": seed, "output-dir": args.runs,
                   "run-name": f"{name.replace(' ', '-')}-s{seed}"}
            total = extra["num-rounds"] * (11 if extra["strategy"] == "fednest" else 1)
            cfg["checkpoint-every"] = total  # one checkpoint, at the end: the final y for the upper objective
            t0 = time.perf_counter()
            d, _ = run_inprocess(cfg, workers=0)
            wall = time.perf_counter() - t0
            rec = read_rounds(d)
            y = load_checkpoint(Path(d))[2]["y"]
            last = rec[-1]
            rows.append({"method": name, "seed": seed, "outer_rounds": outer[extra["strategy"]],
                         "clock_s": last["clock_s"],
                         "upper_objective": upper_objective(cfg, y), "test_loss": last["test_loss"],
                         "test_acc": last["test_acc"], "weight_clean": last["weight_clean"],
                         "weight_corrupted": last["weight_corrupted"], "wall_s": round(wall, 1)})
            rounds.append((f"{name.replace(' ', '-')}-s{seed}", cfg, rec))
            print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)
    write_packed(args.out / "rounds.parquet", rounds)
    lines = [f"digits hyper-cleaning, m = 10, Dirichlet alpha = 0.5, seeds {seeds}; outer rounds {outer}", "",
             "| method | upper objective F | test loss | test accuracy | weight clean - corrupted | simulated s |",
             "|---|---|---|---|---|---|"]

    def ci(vals):
        mean, half, _ = interval(vals)
        return f"{mean:.4f} ± {half:.4f}"

    for name in arms:
        r = [row for row in rows if row["method"] == name]
        lines.append(f"| {name} | {ci([x['upper_objective'] for x in r])} | {ci([x['test_loss'] for x in r])} | "
                     f"{ci([x['test_acc'] for x in r])} | "
                     f"{ci([x['weight_clean'] - x['weight_corrupted'] for x in r])} | "
                     f"{ci([x['clock_s'] for x in r])} |")
    # paired differences against afbo-global (same seed, same data)
    lines += ["", "| paired difference (afbo-global minus) | upper objective F | test accuracy |", "|---|---|---|"]
    g = {row["seed"]: row for row in rows if row["method"] == "afbo-global"}
    for name in ("afbo", "fednest"):
        o = {row["seed"]: row for row in rows if row["method"] == name}
        lines.append(f"| {name} | {ci([g[s]['upper_objective'] - o[s]['upper_objective'] for s in seeds])} | "
                     f"{ci([g[s]['test_acc'] - o[s]['test_acc'] for s in seeds])} |")
    lines += ["", "| paired difference (method minus its outer-lr = 0 control) | upper objective F | test accuracy |",
              "|---|---|---|"]
    for name in OUTER:
        m = {row["seed"]: row for row in rows if row["method"] == name}
        c = {row["seed"]: row for row in rows if row["method"] == f"{name} control"}
        lines.append(f"| {name} | {ci([m[s]['upper_objective'] - c[s]['upper_objective'] for s in seeds])} | "
                     f"{ci([m[s]['test_acc'] - c[s]['test_acc'] for s in seeds])} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
