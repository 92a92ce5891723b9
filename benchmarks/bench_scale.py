"""Benchmark: many virtual clients in the Flower simulation, with the peak memory of the whole run.

    python benchmarks/bench_scale.py --data-dir /abs/dir/with/fashion_mnist.npz [--clients 1000] [--rounds 5]

Runs ZO-HFL on Fashion-MNIST with ``--clients`` SuperNodes (beta = 10 / clients, so about ten
clients work per round; round 1 contacts every SuperNode once to learn which partition it holds)
through ``flwr run`` on a private simulation SuperLink, and samples every 0.5 s the resident memory
(RSS) summed over all processes it started: SuperLink, SuperExec, the simulation process with the
ServerApp, Ray's own processes and its actors. Prints the peak and the round times.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from zofl.launch import local_superlink
from zofl.results import read_rounds


def _tree_rss(root: int) -> tuple[int, int]:
    """(RSS in bytes, number of processes) of ``root`` and all its descendants (Ray's processes
    descend from the simulation process, which descends from the SuperLink)."""
    parents, rss = {}, {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(p.name)] = int(stat[1])
            rss[int(p.name)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, count = 0, 0
    for pid in rss:
        q = pid
        while q > 1 and q != root:
            q = parents.get(q, 0)
        if q == root:
            total, count = total + rss[pid], count + 1
    return total, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--out", help="append the results as markdown to this file")
    args = ap.parse_args()
    cfg = {"dataset": "fashion_mnist", "data-dir": str(Path(args.data_dir).resolve()), "num-clients": args.clients,
           "alpha": args.alpha, "beta": min(1.0, 10 / args.clients), "min-partition-size": 1, "tau": 20.0,
           "num-rounds": args.rounds, "client-wait-s": 600.0}
    peak, procs, stop = [0], [0], threading.Event()
    with tempfile.TemporaryDirectory(prefix="zofl-scale-") as tmp:
        with local_superlink(Path(tmp) / "sl") as sl:
            def sample():
                while not stop.is_set():
                    rss, count = _tree_rss(sl.proc.pid)
                    peak[0], procs[0] = max(peak[0], rss), max(procs[0], count)
                    stop.wait(0.5)

            t_sampler = threading.Thread(target=sample, daemon=True)
            t_sampler.start()
            t = time.perf_counter()
            res = sl.run({**cfg, "output-dir": tmp, "run-name": "scale"}, num_supernodes=args.clients)
            wall = time.perf_counter() - t
            stop.set()
            t_sampler.join()
        if res.returncode != 0 or not (Path(tmp) / "scale" / "summary.json").exists():
            sys.exit((res.stdout + res.stderr)[-4000:])
        rec = read_rounds(Path(tmp) / "scale")
        summary = json.loads((Path(tmp) / "scale" / "summary.json").read_text())
    rounds = ", ".join(f"{r['wall_s']:.2f}" for r in rec[1:])
    lines = [f"clients (SuperNodes): {args.clients}; rounds: {args.rounds}; "
             f"clients per round: {rec[-1]['participants']}",
             f"peak memory, all processes of the run (up to {procs[0]} at once): {peak[0] / 2**30:.2f} GiB",
             f"wall, whole `flwr run`: {wall:.1f} s; ServerApp part: {summary['total_wall_s']:.1f} s",
             f"round wall times (s): {rounds}",
             f"final test accuracy: {rec[-1]['test_acc']:.4f}"]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "a") as f:
            f.write(f"Command: `python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}`\n\n")
            f.write("\n".join(f"- {line}" for line in lines) + "\n\n")


if __name__ == "__main__":
    main()
