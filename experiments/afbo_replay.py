"""Replay one cell of a bilevel grid to a given server step and read its upper-level variable x there (issue 50:
why a regularization run diverged).

    python experiments/afbo_replay.py experiments/afbo_verdict_reg.toml --strategy afbo --seed 7 --round 582 \\
        --out docs/results/afbo_verdict/reg/replay_afbo_seed7.json --set 'data-dir="/abs/data"'

The cell is the grid's run of that strategy and seed with outer-lr > 0; it runs again in this process (same run-
config, so the same draws and the same records; ``zofl.inprocess.run_inprocess``) to ``--round`` (num-rounds set to
it), with a checkpoint there, and the script writes OUT (JSON): the run-config's cell, the round, x's summary there
(mean, std, the largest values and their indices, the entries ``--watch`` names) and, for the regularization task
(coefficient exp(x_k) on feature k's row of W), the lower level's stability bound: a gradient step of lower-lr on
the term (exp(x_k) / 2)||W_k||^2 is stable only while lower-lr * exp(x_k) < 2, i.e. x_k < log(2 / lower-lr); how
many features are past it. The replay's records are checked against the grid's run when ``--records`` names its
rounds.jsonl (the test loss of every record up to the round, to 1e-9 relative).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import tomllib
from pathlib import Path

import numpy as np

from zofl.compare import cell_id, expand_grid
from zofl.config import defaults, parse_set  # parse_set: --set as the grid runner reads it
from zofl.inprocess import run_inprocess


def pick(cells: list[dict], strategy: str, seed: int) -> dict:
    """The one cell of ``strategy`` and ``seed`` whose outer-lr is not 0 (SystemExit naming what was found)."""
    found = [c for c in cells if c["strategy"] == strategy and int(c["seed"]) == seed
             and float(c.get("outer-lr", 1.0)) != 0.0]
    if len(found) != 1:
        raise SystemExit(f"{len(found)} cells of strategy {strategy!r}, seed {seed} with outer-lr > 0 in the grid: "
                         "one is replayed")
    return found[0]


def same(a: float | None, b: float | None) -> bool:
    """Two records' test losses agree: both skipped (eval-every), or equal to 1e-9 relative."""
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


def x_summary(x: np.ndarray, lower_lr: float | None, top: int = 5) -> dict:
    """x's mean, std, its ``top`` largest values and their indices; with ``lower_lr``, the bound log(2 / lower-lr)
    and the number of entries above it."""
    order = np.argsort(x, kind="stable")[::-1][:top]
    out = {"n": int(x.size), "mean": float(np.mean(x)), "std": float(np.std(x)),
           "largest": [float(x[i]) for i in order], "largest_at": [int(i) for i in order]}
    if lower_lr is not None:
        bound = math.log(2.0 / lower_lr)
        out.update({"stable_below": bound, "above_bound": int(np.sum(x > bound))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grid", type=Path)
    ap.add_argument("--strategy", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--round", type=int, required=True, help="the server step whose x is read (>= 1)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="run-config keys over the grid's")
    ap.add_argument("--watch", type=int, nargs="*", default=[], metavar="K", help="entries of x to record by index")
    ap.add_argument("--records", type=Path, help="the grid run's rounds.jsonl, to check the replay against")
    a = ap.parse_args(argv)
    if a.round < 1:
        ap.error("--round must be >= 1")
    cell = pick(expand_grid(tomllib.loads(a.grid.read_text()), parse_set(a.set)), a.strategy, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        # the run stops at the round (a checkpoint there); the records check below says it is the grid's run so far
        cfg = {**cell, "output-dir": tmp, "run-name": "replay", "checkpoint-every": a.round, "num-rounds": a.round}
        run_dir, _ = run_inprocess(cfg, workers=0)
        with np.load(Path(run_dir) / "checkpoint.npz") as z:
            if int(z["round"]) != a.round:  # e.g. a failed run's last checkpoint
                raise SystemExit(f"the run's checkpoint is of round {int(z['round'])}, not {a.round}: it stopped "
                                 "before the round")
            x = np.asarray(z["x"], dtype=np.float64)
        if any(not 0 <= k < x.size for k in a.watch):
            raise SystemExit(f"--watch: x has {x.size} entries (indices 0..{x.size - 1})")
        records = [json.loads(line) for line in open(Path(run_dir) / "rounds.jsonl")][: a.round + 1]
    checked = None
    if a.records is not None:
        theirs = [json.loads(line) for line in open(a.records)][: a.round + 1]
        checked = len(theirs) == len(records) and all(same(m.get("test_loss"), t.get("test_loss"))
                                                      for m, t in zip(records, theirs))
        if not checked:
            raise SystemExit(f"the replay's records differ from {a.records} before round {a.round}")
    reg = cell.get("task") == "regularization"
    result = {"grid": str(a.grid), "cell": cell_id(cell), "strategy": a.strategy, "seed": a.seed, "round": a.round,
              "clock_s": records[-1].get("clock_s"), "records_checked": checked,
              "x": x_summary(x, float(cell.get("lower-lr", defaults()["lower-lr"])) if reg else None),
              "watched": {str(k): float(x[k]) for k in a.watch}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
