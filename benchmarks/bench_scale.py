"""Benchmark: many virtual clients through Flower's Ray simulation and in-process, with the peak memory of each.

    python benchmarks/bench_scale.py --data-dir /abs/data [--dataset mnist] [--clients 10000] [--rounds 4]
        [--clients-per-node 0 1] [--inprocess] [--engine sync [legacy]] [--strategy zohfl] [--out FILE.json]

Runs ZO-HFL (or ``--strategy``, on each ``--engine`` in turn; beta = 100 / clients, at most 1: about a hundred
clients per round; tau 20; alpha 1) on ``--dataset`` (or, with ``--generated ROWS``, a generated set of that many
rows as data-path) with ``--clients`` clients, once per ``--clients-per-node`` value (0 = auto, 1 = one SuperNode per
client: the layout before issue 51) through ``flwr run`` on a private simulation SuperLink, and with
``--inprocess`` once on the in-process Grid (the same ServerApp code without Ray or a SuperLink: the floor of what
Flower's machinery adds). Each run is a fresh process tree; every 0.5 s the resident memory (RSS) summed over all
its processes is sampled (SuperLink, SuperExec, the simulation process with the ServerApp, Ray's processes and
actors; in-process: the process and its workers). For each it prints: learning the node map,
round 1, the median seconds per round after it, the whole command, the peak memory, and the final accuracy
(the node map and the run's other start-up parts from its summary.json's ``startup``)
(the same for every layout: the numbers do not depend on it). The splits folder is a fresh temporary one per run
(``split-cache`` makes the split once per run). ``--out`` writes the figures as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from zofl.launch import local_superlink
from zofl.results import read_rounds

INPROCESS = """
import json, sys
from zofl.inprocess import run_inprocess
run_inprocess(json.loads(sys.argv[1]), workers=int(sys.argv[2]), start_method="spawn")
"""


def _tree_rss(root: int) -> tuple[int, int]:
    """(RSS in bytes, number of processes) of ``root`` and all its descendants."""
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


class Sampler:
    """The peak RSS of a process tree, sampled every 0.5 s in a thread (``with Sampler(pid_fn) as s``)."""

    def __init__(self, root):
        self.root, self.peak, self.procs, self.stop = root, 0, 0, threading.Event()

    def __enter__(self):
        def sample():
            while not self.stop.is_set():
                pid = self.root()
                if pid is not None:
                    rss, count = _tree_rss(pid)
                    self.peak, self.procs = max(self.peak, rss), max(self.procs, count)
                self.stop.wait(0.5)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _figures(folder: Path, wall: float, sampler: Sampler, layout: str) -> dict:
    rec = read_rounds(folder)
    walls = [r["wall_s"] for r in rec[1:]]
    startup = json.loads((folder / "summary.json").read_text()).get("startup") or {}
    return {"layout": layout, "node_map_s": startup.get("node_map_s"),
            "runtime_s": startup.get("runtime_s"), "setup_s": startup.get("setup_s"),
            "first_answer_s": startup.get("first_answer_s"),
            "round1_s": walls[0] if walls else None,
            "s_per_round": statistics.median(walls[1:]) if len(walls) > 1 else None, "whole_s": wall,
            # the floor: the used replies' own compute per round (summed over clients; 2 cores run it at most twice
            # as fast) after round 1
            "compute_per_round_s": statistics.median(r["client_compute_s"] for r in rec[2:]) if len(rec) > 2 else None,
            "peak_gib": sampler.peak / 2**30, "processes": sampler.procs, "final_acc": rec[-1]["test_acc"],
            "participants": rec[-1]["participants"]}


def run_ray(cfg: dict, tmp: Path, k: int) -> dict:
    from zofl.config import clients_per_node, parse_config
    from zofl.core.shares import num_nodes

    cfg = {**cfg, "clients-per-node": k, "output-dir": str(tmp), "run-name": f"ray-{k}"}
    parsed = parse_config(cfg)
    nodes = num_nodes(parsed.num_clients, clients_per_node(parsed))
    with local_superlink(tmp / f"sl-{k}") as sl:
        with Sampler(lambda: sl.proc.pid) as s:
            t = time.perf_counter()
            res = sl.run(cfg, num_supernodes=nodes)
            wall = time.perf_counter() - t
    if res.returncode != 0 or not (tmp / f"ray-{k}" / "summary.json").exists():
        sys.exit((res.stdout + res.stderr)[-4000:])
    return _figures(tmp / f"ray-{k}", wall, s, f"Ray, clients-per-node {k or 'auto'} ({nodes} SuperNodes)")


def run_inprocess(cfg: dict, tmp: Path, workers: int) -> dict:
    cfg = {**cfg, "output-dir": str(tmp), "run-name": "inprocess"}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", INPROCESS, json.dumps(cfg), str(workers)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with Sampler(lambda: proc.pid) as s:
        log, _ = proc.communicate()
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(log[-4000:])
    return _figures(tmp / "inprocess", wall, s, f"in-process Grid, {workers} worker(s)")


def engine_row(row: dict, engine: str) -> dict:
    """A row of the legacy engine says so in its layout (the Message-API engine's rows are named as before)."""
    return row if engine == "sync" else {**row, "layout": f"{row['layout']}, legacy engine"}


def table(rows: list[dict]) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    rows = [{"compute_per_round_s": None, "first_answer_s": None, **r} for r in rows]  # files from before

    out = ["| layout | node map (s) | of it, to the first answer (s) | round 1 (s) | s/round after round 1 | "
           "clients' compute per round (s) | "
           "server set-up (s) | whole command (s) | peak memory (GiB) | processes | final acc. |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['layout']} | {f(r['node_map_s'], '.2f')} | {f(r['first_answer_s'], '.2f')} | "
                   f"{f(r['round1_s'], '.2f')} | "
                   f"{f(r['s_per_round'], '.2f')} | {f(r['compute_per_round_s'], '.2f')} | {f(r['setup_s'], '.1f')} | "
                   f"{r['whole_s']:.1f} | {r['peak_gib']:.2f} | {r['processes']} | {r['final_acc']:.4f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", type=Path, help="print the table of a saved --out file and stop")
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--clients", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--clients-per-node", type=int, nargs="*", default=[0])
    ap.add_argument("--inprocess", action="store_true", help="also the in-process Grid (the floor)")
    ap.add_argument("--workers", type=int, default=2, help="in-process client processes")
    ap.add_argument("--generated", type=int, metavar="ROWS",
                    help="instead of --dataset: a generated set of ROWS examples (32 features, 10 classes), as "
                         "data-path")
    ap.add_argument("--engine", choices=("sync", "legacy"), nargs="+", default=["sync"])
    ap.add_argument("--strategy", default="zohfl", help="a synchronous method (run-config strategy)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    if args.source:
        print(table(json.loads(args.source.read_text())["rows"]))
        return
    if args.data_dir is None:
        ap.error("--data-dir is required")
    cfg = {"dataset": args.dataset, "data-dir": str(args.data_dir.expanduser().resolve()), "num-clients": args.clients,
           "alpha": 1.0, "beta": min(1.0, 100 / args.clients), "tau": 20.0, "num-rounds": args.rounds,
           "client-wait-s": 900.0, "strategy": args.strategy}
    rows = []
    with tempfile.TemporaryDirectory(prefix="zofl-scale-") as tmp:
        if args.generated:
            cfg["data-path"] = generate(Path(tmp) / "generated.npz", args.generated)
        for engine in args.engine:
            run_cfg, out = {**cfg, "engine": engine}, Path(tmp) / engine
            out.mkdir()
            for k in args.clients_per_node:
                rows.append(engine_row(run_ray({**run_cfg, "data-dir": _fresh_data(cfg, out, f"d{k}")}, out, k),
                                       engine))
            if args.inprocess:
                rows.append(engine_row(run_inprocess({**run_cfg, "data-dir": _fresh_data(cfg, out, "dip")}, out,
                                                     args.workers), engine))
    data = f"a generated set of {args.generated:,} rows" if args.generated else args.dataset
    print(f"{args.clients:,} clients, {args.rounds} rounds, {args.strategy} on {data} (engine "
          f"{', '.join(args.engine)}), beta {cfg['beta']:g}")
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv[1:]), "config": cfg, "rows": rows}, indent=1)
                            + "\n")


def generate(path: Path, rows: int, features: int = 32, classes: int = 10) -> str:
    """A learnable synthetic set: labels uniform, features Gaussian around a class mean (seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, rows)
    means = rng.normal(0.0, 1.0, (classes, features)).astype(np.float32)
    x = means[y] + rng.normal(0.0, 2.0, (rows, features)).astype(np.float32)
    np.savez(path, x=x, y=y.astype(np.int64))
    return str(path)


def _fresh_data(cfg: dict, tmp: Path, name: str) -> str:
    """A data-dir of its own (the dataset linked in, no splits folder): every run makes its split once."""
    src = Path(cfg["data-dir"]) / f"{cfg['dataset']}.npz"
    folder = tmp / name
    folder.mkdir()
    if src.exists():
        os.symlink(src, folder / src.name)
    return str(folder)


if __name__ == "__main__":
    main()
