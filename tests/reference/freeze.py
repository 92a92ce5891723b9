"""Freeze per-round figures of short runs as reference data (tests/reference/rounds.json).

Written once, with the code as it was before the engines were split (commit 5d32237), and kept:
tests/test_engines.py checks that every engine still gives these numbers bit for bit. A method added
later gets its entry in RUNS and is frozen once, when it lands, with ``--add`` (scaffnew and fedmspp,
issue 34): only the entries the file lacks are computed, the others are kept byte for byte, and the runs
use the freezing machine's kernels (AVX2, OpenBLAS Haswell: ``kernels_env``, as test_engines' digest test)
so that their x_sha256 is that machine's too.

    python tests/reference/freeze.py [--force | --add] --reason 'what changed in the numbers and why it is right'

Every write is recorded with its reason and the file's SHA-256 in tests/reference/ledger.json (ledger.py); a test
fails when the file's bytes are not the last recorded ones.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from .ledger import record  # imported as tests.reference.freeze (by the tests)
except ImportError:
    from ledger import record  # run as a script: the module beside it

from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

OUT = Path(__file__).with_name("rounds.json")
BASE = {"num-rounds": 4, "num-clients": 5, "beta": 0.6, "tau": 3.0}
RUNS = {
    "zohfl-scalars-stragglers": {**BASE, "straggler-prob": 0.3},
    "zohfl-vectors-rho": {**BASE, "uplink": "vectors", "directions": 2, "weighting": "rho"},
    "zohfl-faults": {**BASE, "beta": 1.0, "crash-prob": 0.2, "corrupt-prob": 0.3},
    "fedavg": {**BASE, "strategy": "fedavg"},
    "fedprox": {**BASE, "strategy": "fedprox", "prox-mu": 0.1},
    "scaffold": {**BASE, "strategy": "scaffold"},
    "flwr-fedavg": {**BASE, "strategy": "flwr-fedavg", "beta": 1.0},
    "fedrzo-nn": {**BASE, "strategy": "fedrzo-nn", "task": "relu-net", "local-steps": 5, "zo-lr": 1e-4,
                  "loss-scale": "sum"},
    "fedrzo-bl-hyper": {**BASE, "strategy": "fedrzo-bl", "task": "hyper-logistic", "num-rounds": 2,
                        "local-steps": 3, "lower-rounds": 1, "lower-rounds-growth": 0.5, "zo-lr": 0.01,
                        "eta": 0.01},
    "fedrzo-bl-fair": {**BASE, "strategy": "fedrzo-bl", "task": "fair-relu", "num-rounds": 2, "local-steps": 3,
                       "lower-rounds": 1, "zo-lr": 1e-3},
    # added with --add (issue 34)
    "scaffnew": {**BASE, "strategy": "scaffnew", "comm-prob": 0.2, "local-lr": 0.1, "straggler-prob": 0.3},
    "fedmspp": {**BASE, "strategy": "fedmspp", "mspp-lr": 0.5},
}
COMPARED = ("round", "test_acc", "test_loss", "f1", "f2_est", "objective", "sampled", "participants", "stragglers",
            "failures", "dropped", "rejected", "local_steps", "H", "gamma_r", "level", "phase", "upper_round")


def figures(run_dir: Path) -> list[dict]:
    return [{k: r.get(k) for k in COMPARED if k in r} for r in read_rounds(run_dir)]


def x_digest(x) -> str:
    return hashlib.sha256(x.astype("<f8").tobytes()).hexdigest()


def kernels_env() -> dict[str, str]:
    """The environment that makes numpy and OpenBLAS compute as the freezing (AVX2) machine did."""
    import numpy

    core = getattr(numpy, "_core", None) or numpy.core
    newer = [f for f in getattr(core._multiarray_umath, "__cpu_dispatch__", []) if f.startswith(("AVX512", "X86_V4"))]
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(newer), "OPENBLAS_CORETYPE": "Haswell"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--add", action="store_true", help="freeze only the RUNS the file lacks, keep the others")
    ap.add_argument("--reason", default="", help="what changed in the numbers and why it is right (required: "
                                                 "recorded in tests/reference/ledger.json)")
    args = ap.parse_args()
    if not args.reason.strip():
        sys.exit("pass --reason 'what changed and why it is right': a frozen reference is never rewritten silently")
    env = kernels_env()
    if args.add and any(os.environ.get(k) != env[k] for k in ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")):
        sys.exit(subprocess.run([sys.executable, __file__, "--add", "--reason", args.reason],
                                env=env).returncode)  # the freezing kernels
    if OUT.exists() and not (args.force or args.add):
        sys.exit(f"{OUT} exists: it is the frozen reference; pass --force to overwrite it or --add for new RUNS")
    out = json.loads(OUT.read_text()) if args.add else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in RUNS.items():
            if name in out:
                continue
            d, x = run_inprocess({**cfg, "output-dir": tmp, "run-name": name}, workers=0)
            out[name] = {"run-config": cfg, "rounds": figures(d), "x_sha256": x_digest(x)}
            print(name, out[name]["rounds"][-1]["test_loss"])
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    record(OUT.name, args.reason)


if __name__ == "__main__":
    main()
