"""Benchmark: comparison cells per minute, by the way the runner runs them.

    python benchmarks/bench_compare.py [--seeds 4] [--rounds 20] [--modes ...] [--timeline] [--out FILE.json]

One grid (4 strategies -- fedavg, fedprox, scaffold, zohfl -- x --seeds seeds, --rounds rounds on the built-in
digits, 10 clients), run from an empty folder by each mode in turn (``python -m zofl.compare``, a fresh process):

  inprocess-1, inprocess-2   --via inprocess --parallel 1 / 2 (the physical floor's neighbour: no Flower runtime)
  flower                     --via flower --parallel 2 (a SuperLink per slot; each cell's simulation starts a Ray)
  flower-kept-ray            the same with a Ray runtime kept per slot, each cell's simulation joining it
                             (``run_grid(share_ray=True)``; not the runner's default)
  ray-1-node, ray-2-nodes    --via ray --address of a Ray cluster on this machine of 1 node / 2 nodes of 1 CPU
                             each (started before the command and timed apart)

``--timeline``: where one Flower cell's time goes, for each of the two Flower layouts: one cell (fedavg, seed 1)
through ``flwr run --stream`` on a SuperLink (with a Ray kept for it, or not), its output's lines timed as they
arrive: the CLI building and sending the App ("Successfully started run"), the simulation process's start
("Starting Flower Simulation"), the ServerApp's set-up, Ray and the node map (to the strategy's start), the rounds
(to zofl's summary line "results:"), and the end (Ray job, processes and `flwr run` exiting).

Per mode: the whole command's seconds and cells per minute, and the steady rate (cells per minute between the
first and the last cell to finish, read from their summary.json's times: start-up excluded), and the physical
floor: the cells' summed client compute (summary.json total_client_compute_s) as cells per minute on the CPUs the
mode uses (the server's own steps, evaluation included, come on top: the in-process rows show how much). Every
mode's results.csv must equal the first's but for wall_s (checked).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

MODES = ("inprocess-1", "inprocess-2", "flower", "flower-kept-ray", "ray-1-node", "ray-2-nodes")
STRATEGIES = ("fedavg", "fedprox", "scaffold", "zohfl")
KEPT_RAY = """
import sys
from pathlib import Path
from zofl.compare import expand_grid, read_grid, run_grid
cells = expand_grid(read_grid(sys.argv[1]), {})
failed = run_grid(cells, Path(sys.argv[2]), 2, "flower", progress=False, share_ray=True)
sys.exit(1 if failed else 0)
"""


def grid_file(folder: Path, seeds: int, rounds: int) -> Path:
    path = folder / "grid.toml"
    path.write_text(f"[fixed]\nnum-rounds = {rounds}\nnum-clients = 10\n\n[grid]\n"
                    f"strategy = {json.dumps(list(STRATEGIES))}\nseed = {list(range(1, seeds + 1))}\n")
    return path


def run_mode(mode: str, grid: Path, out: Path) -> dict:
    from zofl.launch import local_ray_cluster

    with ExitStack() as stack:
        cluster_s = None
        if mode == "flower-kept-ray":
            cmd = [sys.executable, "-c", KEPT_RAY, str(grid), str(out)]
        else:
            via, _, rest = mode.partition("-")
            cmd = [sys.executable, "-m", "zofl.compare", str(grid), "--out", str(out), "--via", via]
            if via == "inprocess":
                cmd += ["--parallel", rest]
            elif via == "flower":
                cmd += ["--parallel", "2"]
            else:
                t = time.perf_counter()
                address = stack.enter_context(local_ray_cluster(int(rest.split("-")[0]), 1)).address
                cluster_s = time.perf_counter() - t
                cmd += ["--address", address]
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
        wall = time.perf_counter() - t
    if res.returncode:
        raise SystemExit(f"{mode} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    summaries = [p / "summary.json" for p in (out / "cells").iterdir()]
    ends = sorted(p.stat().st_mtime for p in summaries)
    compute = sum(json.loads(p.read_text())["total_client_compute_s"] for p in summaries)
    cpus = 1 if mode in ("inprocess-1", "ray-1-node") else 2
    steady = 60 * (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 and ends[-1] > ends[0] else None
    return {"mode": mode, "cells": len(ends), "wall_s": wall, "cells_per_min": 60 * len(ends) / wall,
            "steady_cells_per_min": steady, "cluster_start_s": cluster_s, "client_compute_s": compute,
            "floor_cells_per_min": 60 * len(ends) * cpus / compute if compute else None}


MARKS = (("app sent (flwr run: build, upload, start)", "Successfully started run"),
         ("simulation process started", "Starting Flower Simulation"),
         ("server set-up, Ray, node map", "Starting MessageStrategy"),
         ("rounds", "  results: "))


def timeline(grid_dir: Path, rounds: int, keep_ray: bool) -> dict:
    """Seconds of each phase of one cell through ``flwr run --stream`` (MARKS, then the exit)."""
    from zofl.launch import flwr_run_command, local_ray_cluster, local_superlink

    with ExitStack() as stack:
        env = {"RAY_ADDRESS": stack.enter_context(local_ray_cluster(1, 2)).address} if keep_ray else {}
        link = stack.enter_context(local_superlink(extra_env=env))
        for i in range(2):  # the first cell warms the SuperLink (and the kept Ray): the second is timed
            cfg = {"strategy": "fedavg", "seed": 1, "num-rounds": rounds, "num-clients": 10,
                   "output-dir": str(grid_dir / f"timeline-{keep_ray}"), "run-name": f"cell{i}"}
            fed = "num-supernodes=10 client-resources-num-cpus=1" + ("" if keep_ray else " init-args-num-cpus=2")
            t0 = time.perf_counter()
            proc = subprocess.Popen(flwr_run_command("zofl", cfg, federation_config=fed), env=link.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            seen: dict[str, float] = {}
            for line in proc.stdout:
                for name, mark in MARKS:
                    if mark in line and name not in seen:
                        seen[name] = time.perf_counter() - t0
            proc.wait()
            end = time.perf_counter() - t0
    if len(seen) != len(MARKS):
        raise SystemExit(f"timeline: only {sorted(seen)} seen")
    phases, last = {}, 0.0
    for name, _ in MARKS:
        phases[name] = seen[name] - last
        last = seen[name]
    phases["end (Ray job, processes, flwr run exit)"] = end - last
    return {"keep_ray": keep_ray, "total_s": end, "phases_s": phases}


def table(data: dict) -> str:
    """The markdown tables of a run's figures (what docs/benchmark-compare.md shows, checked by a test)."""
    rows, lines = data["rows"], data["timeline"]
    ref = next((r for r in rows if r["mode"] == "inprocess-2"), rows[0])
    nan = float("nan")
    out = [f"{len(STRATEGIES) * data['seeds']} cells of {data['rounds']} rounds (digits, 10 clients), "
           f"{data['cpus']} CPUs", "",
           f"| mode | whole command (s) | cells/min | steady cells/min | vs {ref['mode']} (steady) | floor: client "
           "compute only (cells/min) | Ray cluster start (s) | same numbers |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["steady_cells_per_min"] / ref["steady_cells_per_min"] \
            if r["steady_cells_per_min"] and ref["steady_cells_per_min"] else None
        out.append(f"| {r['mode']} | {r['wall_s']:.1f} | {r['cells_per_min']:.1f} | "
                   f"{r['steady_cells_per_min'] or nan:.1f} | {ratio or nan:.2f} | "
                   f"{r['floor_cells_per_min'] or nan:.0f} | "
                   f"{'' if r['cluster_start_s'] is None else format(r['cluster_start_s'], '.1f')} | "
                   f"{'yes' if r['same_results'] else 'NO'} |")
    if lines:
        out += ["", "| phase of one Flower cell (s) | Ray started by the cell | Ray kept by the runner |",
                "|---|---|---|"]
        out += [f"| {name} | {lines[0]['phases_s'][name]:.1f} | {lines[1]['phases_s'][name]:.1f} |"
                for name in lines[0]["phases_s"]]
        out.append(f"| whole cell | {lines[0]['total_s']:.1f} | {lines[1]['total_s']:.1f} |")
    return "\n".join(out)


def results(out: Path) -> list[dict]:
    with open(out / "results.csv") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--timeline", action="store_true", help="also time the phases of one Flower cell")
    ap.add_argument("--out", help="write the figures as JSON")
    args = ap.parse_args(argv)
    rows, first, lines = [], None, []
    with tempfile.TemporaryDirectory() as tmp:
        if args.timeline:
            lines = [timeline(Path(tmp), args.rounds, keep) for keep in (False, True)]
            for t in lines:
                print(json.dumps(t), flush=True)
        grid = grid_file(Path(tmp), args.seeds, args.rounds)
        for mode in args.modes:
            out = Path(tmp) / mode
            row = run_mode(mode, grid, out)
            same = results(out)
            first = first if first is not None else same
            row["same_results"] = same == first
            rows.append(row)
            print(json.dumps(row), flush=True)
    data = {"seeds": args.seeds, "rounds": args.rounds, "cpus": os.cpu_count(), "rows": rows, "timeline": lines}
    print("\n" + table(data))
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    if not all(r["same_results"] for r in rows):
        raise SystemExit("the modes' numbers differ")


if __name__ == "__main__":
    main()
