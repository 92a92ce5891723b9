"""Freeze per-round figures of short asynchronous runs (FedBuff with stale replies, AFBO with APHE's
random depth) as reference data: tests/reference/async_rounds.json.

The synchronous references (freeze.py, rounds.json) have no asynchronous run; these were frozen with the
code of issue 35 (the simulated clock makes an asynchronous run a pure function of its seed), and kept:
tests/test_async_reference.py checks that the asynchronous engine still gives these numbers. Each run is
chosen so that what it guards is exercised: stale replies (FedBuff's staleness weight (1 + s)^-a), a
slow client applied 9 versions late with a = 1, AFBO's outer steps with N_i drawn per client and
APHE's random depth (a depth never 0 changes every outer step), stored updates of silent clients.

    python tests/reference/freeze_async.py [--force] --reason 'what changed in the numbers and why it is right'
(recorded with the file's SHA-256 in tests/reference/ledger.json)
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

try:
    from .ledger import record  # imported as tests.reference.freeze (by the tests)
except ImportError:
    from ledger import record  # run as a script: the module beside it

from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

OUT = Path(__file__).with_name("async_rounds.json")
FEDBUFF = {"strategy": "fedbuff", "engine": "async", "num-clients": 5, "local-steps": 2, "buffer-size": 2}
TOY = {"strategy": "afbo", "engine": "async", "task": "zofl.tasks.hypergrad:QuadraticHypergrad", "num-clients": 4,
       "local-steps": 1, "lower-lr": 0.2, "inner-lr": 0.3, "lipschitz-g": 2.6, "beta": 1.0, "checkpoint-every": 0}
RUNS = {
    "fedbuff-stale": {**FEDBUFF, "num-rounds": 8, "speed-profile": "uniform", "speed-param": 0.2,
                      "availability": "1,0.7", "local-work": "1,2,0.5"},
    "fedbuff-slow-client": {**FEDBUFF, "num-rounds": 10, "buffer-size": 1, "staleness-exponent": 1.0,
                            "speed-profile": "slow", "slow-clients": "1,3", "speed-param": 0.25},
    "afbo-random-depth": {**TOY, "aphe": "random-depth", "neumann-steps": "3,6", "availability": "1,0.5",
                          "local-work": "1,3", "speed-profile": "uniform", "speed-param": 0.2, "inner-rounds": 3,
                          "num-rounds": 24},
    "afbo-hyper-cleaning": {"strategy": "afbo", "engine": "async", "task": "hyper-cleaning", "num-clients": 4,
                            "server-fraction": 0.0, "local-steps": 3, "lower-lr": 0.5, "inner-lr": 1.0,
                            "inner-rounds": 2, "outer-lr": 10.0, "neumann-steps": "2,5", "lipschitz-g": 20.0,
                            "num-rounds": 9, "buffer-size": 2, "speed-profile": "uniform", "speed-param": 0.3},
}
COMPARED = ("round", "test_acc", "test_loss", "f1", "clients", "staleness", "clock_s", "participants", "failures",
            "rejected", "unavailable", "local_steps", "step", "outer_round", "y_error", "x_error", "weight_auc",
            "inner_delay_mean", "outer_delay_mean", "tau", "rho", "held")


def figures(run_dir: Path) -> list[dict]:
    return [{k: r.get(k) for k in COMPARED if k in r} for r in read_rounds(run_dir)]


def model_figures(x: np.ndarray) -> dict:
    """The final model in three numbers (its size, sum and norm): enough to tell it from another."""
    return {"size": int(x.size), "sum": float(x.sum()), "norm": float(np.linalg.norm(x))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--reason", default="", help="what changed in the numbers and why it is right (required)")
    args = ap.parse_args()
    if not args.reason.strip():
        sys.exit("pass --reason 'what changed and why it is right': a frozen reference is never rewritten silently")
    if OUT.exists() and not args.force:
        sys.exit(f"{OUT} exists: it is the frozen reference; pass --force to overwrite it")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in RUNS.items():
            d, x = run_inprocess({**cfg, "output-dir": tmp, "run-name": name}, workers=0)
            out[name] = {"run-config": cfg, "rounds": figures(d), "x": model_figures(x)}
            print(name, out[name]["rounds"][-1]["test_loss"])
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    record(OUT.name, args.reason)


if __name__ == "__main__":
    main()
