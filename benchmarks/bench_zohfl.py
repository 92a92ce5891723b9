"""Benchmark: ZO-HFL local-solve speed and the cost of Flower + Ray, measured in one run.

    python benchmarks/bench_zohfl.py --data-dir /abs/dir/with/fashion_mnist.npz [--rounds 20]

Prints (and with --out writes as markdown):
1. local SGD steps per second of the project's solver (``projected_sgd`` with the softmax
   task's gradient) next to a plain numpy loop of the same math, interleaved, on one client of
   Fashion-MNIST, batch 32;
2. a ZO-HFL run (10 clients, beta 0.5, tau 20) through ``flwr run`` on a local simulation
   SuperLink (Ray backend, 2 actors of 1 CPU), and the same run in-process (Flower's round
   loop, clients in a pool of 2 spawned processes that load their own data, as Ray actors do:
   same computation, same parallelism), with wall times,
   per-client steps per second and the Flower overhead per round (wall - client compute / 2).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from zofl.algorithms.lower_level import minibatch_indices, projected_sgd
from zofl.inprocess import run_inprocess
from zofl.launch import local_superlink
from zofl.results import read_rounds
from zofl.tasks import DataSpec, SoftmaxTask


def plain_loop(X, Y, idx, lr0, mu, C):
    """The same math as projected_sgd + SoftmaxTask.grad, written as one plain numpy loop."""
    W = np.zeros((X.shape[1], C))
    W0 = W.copy()
    rows = np.arange(idx.shape[1])
    for t in range(len(idx)):
        b = idx[t]
        xb = X[b]
        z = xb @ W
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        z[rows, Y[b]] -= 1.0
        z /= len(b)
        g = xb.T @ z
        g += mu * (W - W0)
        W -= (lr0 / (t + 1)) * g
    return W


def bench_solver(data_dir: str, steps: int, repeats: int) -> dict:
    task = SoftmaxTask()
    spec = DataSpec(dataset="fashion_mnist", data_dir=data_dir, num_clients=10, alpha=1.0)
    d = task.client_data(spec, 0)
    C, n = d.num_classes, d.x.shape[1] * d.num_classes
    idx = minibatch_indices(0, len(d), steps, 32)
    grad = lambda p, i: task.grad(p, d.x[i], d.y[i])  # noqa: E731
    x = np.zeros(n)
    ours, plain = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        t = time.perf_counter()
        y = projected_sgd(grad, x, x, idx, 0.1, 1.0)
        ours.append(steps / (time.perf_counter() - t))
        t = time.perf_counter()
        W = plain_loop(d.x, d.y, idx, 0.1, 1.0, C)
        plain.append(steps / (time.perf_counter() - t))
    np.testing.assert_allclose(y, W.reshape(-1), rtol=1e-9, atol=1e-12)  # same math
    return {"client_examples": len(d), "ours_steps_s": float(np.median(ours)), "plain_steps_s": float(np.median(plain)),
            "ratio": float(np.median(ours) / np.median(plain))}


def summarize(run_dir: Path, parallel: int) -> dict:
    """Round figures; steps/s per client leaves out round 1, where each worker loads its data."""
    rec = read_rounds(run_dir)[1:]
    wall = np.array([r["wall_s"] for r in rec])
    comp = np.array([r["client_compute_s"] for r in rec])
    steps = np.array([r["local_steps"] for r in rec])
    return {"rounds": len(rec), "sum_round_wall_s": float(wall.sum()), "client_compute_s": float(comp.sum()),
            "steps": int(steps.sum()), "steps_per_s_per_client": float(steps[1:].sum() / comp[1:].sum()),
            "overhead_per_round_s": float(np.median(wall - comp / parallel)),
            "overhead_per_round_s_after_r1": float(np.median((wall - comp / parallel)[1:])),
            "final_test_acc": rec[-1]["test_acc"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="absolute folder holding fashion_mnist.npz")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tau", type=float, default=20.0, help="H_r = ceil(tau sqrt(r+1)): the work per round")
    ap.add_argument("--solver-steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="write the results as markdown to this file")
    args = ap.parse_args()
    data_dir = str(Path(args.data_dir).resolve())

    solver = bench_solver(data_dir, args.solver_steps, args.repeats)
    print(f"[solver] ours {solver['ours_steps_s']:.0f} steps/s, plain numpy {solver['plain_steps_s']:.0f} steps/s, "
          f"ratio {solver['ratio']:.3f}", flush=True)

    cfg = {"dataset": "fashion_mnist", "data-dir": data_dir, "num-clients": 10, "alpha": 1.0, "beta": 0.5,
           "tau": args.tau, "num-rounds": args.rounds, "seed": 0}
    with tempfile.TemporaryDirectory(prefix="zofl-bench-") as tmp:
        out = Path(tmp)
        t = time.perf_counter()
        d_ip, _ = run_inprocess({**cfg, "output-dir": str(out), "run-name": "inprocess"}, workers=2,
                                start_method="spawn")
        wall_ip = time.perf_counter() - t
        ip = summarize(d_ip, 2)
        print(f"[in-process] {wall_ip:.2f}s wall, {ip['steps_per_s_per_client']:.0f} steps/s per client", flush=True)
        with local_superlink(out / "superlink") as sl:
            t = time.perf_counter()
            res = sl.run({**cfg, "output-dir": str(out), "run-name": "flower"}, num_supernodes=10, cpus_per_client=1)
            wall_cmd = time.perf_counter() - t
        if res.returncode != 0:
            sys.exit(res.stdout[-3000:] + res.stderr[-3000:])
        fl = summarize(out / "flower", 2)
        fl_summary = json.loads((out / "flower" / "summary.json").read_text())
        ip_summary = json.loads((d_ip / "summary.json").read_text())
        print(f"[flower] {wall_cmd:.2f}s for the flwr run command, {fl_summary['total_wall_s']:.2f}s in the ServerApp",
              flush=True)

    rows = [
        ("local SGD steps/s, project solver (1 core)", f"{solver['ours_steps_s']:.0f}"),
        ("local SGD steps/s, plain numpy loop (1 core)", f"{solver['plain_steps_s']:.0f}"),
        ("solver / plain numpy", f"{solver['ratio']:.3f}"),
        ("in-run steps/s per client after round 1, Flower", f"{fl['steps_per_s_per_client']:.0f}"),
        ("in-run steps/s per client after round 1, in-process", f"{ip['steps_per_s_per_client']:.0f}"),
        ("local SGD steps in the run", f"{fl['steps']}"),
        ("client compute, sum over clients (s)", f"{fl['client_compute_s']:.2f}"),
        ("wall, in-process run, 2 worker processes (s)", f"{wall_ip:.2f}"),
        ("wall, in-process, ServerApp part (s)", f"{ip_summary['total_wall_s']:.2f}"),
        ("wall, `flwr run` command incl. Ray start (s)", f"{wall_cmd:.2f}"),
        ("wall, Flower ServerApp part (s)", f"{fl_summary['total_wall_s']:.2f}"),
        ("ratio Flower / in-process, ServerApp parts",
         f"{fl_summary['total_wall_s'] / ip_summary['total_wall_s']:.2f}"),
        ("ratio `flwr run` command / in-process run", f"{wall_cmd / wall_ip:.2f}"),
        ("Flower overhead per round, median (s)", f"{fl['overhead_per_round_s']:.3f}"),
        ("Flower overhead per round, median after round 1 (s)", f"{fl['overhead_per_round_s_after_r1']:.3f}"),
        ("in-process overhead per round, median (s)", f"{ip['overhead_per_round_s']:.3f}"),
        ("final test accuracy, Flower / in-process", f"{fl['final_test_acc']:.4f} / {ip['final_test_acc']:.4f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    if args.out:
        cmd = "python benchmarks/bench_zohfl.py " + " ".join(sys.argv[1:])
        md = [f"Command: `{cmd}`", "",
              f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"numpy {np.__version__}; {time.strftime('%Y-%m-%d')}", "",
              f"Run: ZO-HFL, Fashion-MNIST, m = 10, alpha = 1, beta = 0.5, tau = {args.tau:g}, R = {args.rounds}, "
              "batch 32, other keys at their defaults; Flower simulation with 10 SuperNodes, 1 CPU per client "
              "(2 Ray actors).", "", "| figure | value |", "|---|---|"]
        md += [f"| {k} | {v} |" for k, v in rows]
        with open(args.out, "a") as f:
            f.write("\n".join(md) + "\n\n")


if __name__ == "__main__":
    main()
