"""Benchmark: BLAS threads in the experiment runner's cell processes (docs/benchmark-blas.md).

    python benchmarks/bench_blas.py --data-dir /abs/data --out docs/benchmark-blas.json

One cell, run with the in-process engine (workers = 0, as ``python -m zofl.compare --via inprocess``
runs each cell): FedAvg on CIFAR-10 (standardized inputs, x0-lr 0.001, local-lr 0.012, alpha 1000,
beta 0.9, m = 10, tau 20, seed 100) for --rounds rounds. Four ways, interleaved over --repeats:
numpy's BLAS with its default threads (one per core) or with one (OPENBLAS_NUM_THREADS = 1, what the
runner sets), each alone and as two copies at once (the runner's --parallel 2 on 2 cores). Each run is
its own process. Prints, per way, the median wall time and client compute, and whether every run gave
the same rounds (test accuracy and loss) bit for bit, or else the largest difference from the first run:
BLAS threads may change the order of a sum, hence the last bits (seen on a machine whose OpenBLAS
runs with OPENBLAS_CORETYPE set; bit for bit on others). The floor is the summed client compute
of the fastest way: what the local SGD steps themselves cost.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zofl.launch import BLAS_THREADS_ENV
from zofl.results import read_rounds

CELL = {"strategy": "fedavg", "dataset": "cifar10", "standardize": True, "x0-lr": 0.001, "local-lr": 0.012,
        "alpha": 1000.0, "beta": 0.9, "num-clients": 10, "tau": 20.0, "seed": 100, "checkpoint-every": 0}
RUN = """
import json, logging, sys
from zofl.inprocess import run_inprocess
logging.getLogger("flwr").setLevel(logging.WARNING)
run_inprocess(json.loads(sys.argv[1]), workers=0)
"""


def start(cfg: dict, one_thread: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREADS_ENV}
    if one_thread:
        env.update({k: "1" for k in BLAS_THREADS_ENV})
    return subprocess.Popen([sys.executable, "-c", RUN, json.dumps(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def result(run_dir: Path) -> tuple[float, list]:
    summary = json.loads((run_dir / "summary.json").read_text())
    rounds = [(r["round"], r["test_acc"], r["test_loss"]) for r in read_rounds(run_dir)]
    return summary["total_client_compute_s"], rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    ways = [("default threads, alone", False, 1), ("1 thread, alone", True, 1),
            ("default threads, 2 at once", False, 2), ("1 thread, 2 at once", True, 2)]
    walls: dict[str, list[float]] = {w[0]: [] for w in ways}
    compute: dict[str, list[float]] = {w[0]: [] for w in ways}
    reference = None
    differ: dict[str, float] = {w[0]: 0.0 for w in ways}  # largest |test loss - the first run's| per way
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name, one, copies in ways:
                cfgs = [{**CELL, "data-dir": args.data_dir, "num-rounds": args.rounds, "output-dir": tmp,
                         "run-name": f"r{rep}-{name.replace(' ', '_').replace(',', '')}-{i}"} for i in range(copies)]
                t = time.perf_counter()
                procs = [start(c, one) for c in cfgs]
                for p in procs:
                    _, err = p.communicate()
                    if p.returncode:
                        sys.exit(f"{name}: run failed\n{err[-2000:]}")
                wall = time.perf_counter() - t
                for c in cfgs:
                    secs, rounds = result(Path(tmp) / c["run-name"])
                    reference = reference or rounds
                    if [r[0] for r in rounds] != [r[0] for r in reference]:
                        sys.exit(f"{name}: other rounds than the first run's")
                    differ[name] = max(differ[name], *(abs(a[2] - b[2]) for a, b in zip(rounds, reference)),
                                       *(abs(a[1] - b[1]) for a, b in zip(rounds, reference)))
                    compute[name].append(secs)
                walls[name].append(wall)
                print(f"repeat {rep}: {name}: {wall:.1f} s wall", flush=True)
    floor = min(statistics.median(v) for v in compute.values())
    same = all(v == 0 for v in differ.values())
    print(f"\nCIFAR-10 FedAvg, {args.rounds} rounds; median over {args.repeats} repeats; "
          + ("every run gave the same rounds bit for bit" if same else
             "largest difference from the first run's test loss or accuracy: "
             + ", ".join(f"{n} {v:.2g}" for n, v in differ.items())))
    print(f"{'way':30} {'wall s':>8} {'client compute s (per cell)':>28}")
    for name, _, copies in ways:
        print(f"{name:30} {statistics.median(walls[name]):8.1f} {statistics.median(compute[name]):28.1f}")
    for copies in (1, 2):
        d, o = (statistics.median(walls[n]) for n, one, c in ways if c == copies)
        print(f"{copies} at once: default / 1 thread = {d / o:.1f}x in wall time")
    print(f"floor (the local steps' compute of the fastest way, one cell): {floor:.1f} s")
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "repeats": args.repeats, "walls": walls,
                                        "client_compute": compute, "floor_s": floor,
                                        "largest_difference": differ}, indent=1))


if __name__ == "__main__":
    main()
