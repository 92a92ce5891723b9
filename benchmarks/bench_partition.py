"""Benchmark: reading one Parquet file of local data and partitioning it over many simulated clients (issue 48).

    python benchmarks/bench_partition.py [--rows 100000] [--clients 1000] [--features 20] [--out FILE.json]
                                         [--md FILE.md]

Writes a Parquet file of ``--rows`` rows (``--features`` float features, a label of 10 classes, a writer-id column
with ``--clients`` distinct values, every one used), then times, each next to its physical floor:

* reading it with ``zofl.tasks.sources.read_local`` (bounded, checked, float32 rows) | pyarrow alone reading the file;
* ``partition(..., "natural", clients)`` (one client per writer) | numpy's argsort and unique of the id column;
* ``partition(..., "dirichlet", clients)`` (alpha 1) | numpy's argsort of the labels and one Dirichlet draw per class;
* ``partition(..., "iid", clients)`` | numpy's permutation and array_split.

Imports and a first call of each are made before any timing. Prints the seconds (the best of ``--repeat``) and,
with ``--out``, writes them as JSON. The target: the natural partition for 1,000 clients of 100,000 rows under
10 s. Nothing starts Flower. The smallest setting (``--rows 400 --clients 4``) runs in a few seconds, most of it
importing pyarrow and datasets.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """(the least wall time of ``repeat`` calls of ``fn``, its last result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def write_table(path: Path, rows: int, clients: int, features: int, seed: int = 0) -> None:
    """The benchmark's Parquet file: float32 features f0.., an int64 label (10 classes), an int64 writer id with
    exactly ``clients`` distinct values (row i's writer is i mod clients, shuffled)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    cols = {f"f{j}": rng.standard_normal(rows, dtype=np.float32) for j in range(features)}
    cols["label"] = rng.integers(0, 10, rows)
    cols["writer"] = rng.permutation(np.arange(rows, dtype=np.int64) % clients)
    pq.write_table(pa.table(cols), path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=1_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1, help="time each step this many times, report the best")
    ap.add_argument("--out", help="write the figures to this JSON file")
    ap.add_argument("--md", help="write them as a Markdown page (docs/benchmark-partition.md), the command included")
    args = ap.parse_args(argv)
    if not 1 <= args.clients <= args.rows:
        ap.error(f"--clients must lie in 1..--rows ({args.rows}), got {args.clients}")

    import pyarrow.parquet as pq

    from zofl.tasks.sources import PartitionParams, partition, read_local

    n, m = args.rows, args.clients
    for scheme in ("natural", "dirichlet", "iid"):  # imports (datasets, flwr-datasets) and first calls: not timed
        partition(np.arange(20) % 2, np.arange(20) % 2, scheme, 2, PartitionParams(min_size=1))
    with tempfile.TemporaryDirectory(prefix="zofl-bench-partition-") as tmp:
        path = Path(tmp) / "local.parquet"
        t_write, _ = _best(lambda: write_table(path, n, m, args.features), 1)
        pq.read_table(path)  # warm: the first read of a process pays for pyarrow's own set-up
        size = path.stat().st_size
        floor_read, _ = _best(lambda: pq.read_table(path), args.repeat)
        t_read, data = _best(lambda: read_local(path, id_column="writer"), args.repeat)
    labels, ids = data.y, data.ids

    def floor_natural():
        order = np.argsort(ids, kind="stable")
        _, starts = np.unique(ids[order], return_index=True)
        return np.split(order, starts[1:])

    def floor_dirichlet():
        rng = np.random.default_rng(0)
        order = np.argsort(labels, kind="stable")
        _, starts = np.unique(labels[order], return_index=True)
        return [rng.dirichlet(np.ones(m)) for _ in starts]

    def floor_iid():
        return np.array_split(np.random.default_rng(0).permutation(n), m)

    params = PartitionParams(alpha=1.0, min_size=min(10, n // m))
    steps = {"read": (t_read, floor_read, "pyarrow.parquet.read_table of the file")}
    for scheme, floor, what in (("natural", floor_natural, "numpy argsort + unique of the id column"),
                                ("dirichlet", floor_dirichlet, "numpy argsort of labels + a Dirichlet draw per class"),
                                ("iid", floor_iid, "numpy permutation + array_split")):
        t, parts = _best(lambda s=scheme: partition(labels, ids, s, m, params, seed=0), args.repeat)
        total = sum(len(p) for p in parts)
        if len(parts) != m or total != n or len(np.unique(np.concatenate(parts))) != n:
            sys.exit(f"{scheme}: {len(parts)} clients holding {total} rows, expected {m} clients holding all {n}")
        steps[scheme] = (t, _best(floor, args.repeat)[0], what)

    print(f"{n:,} rows x {args.features} features, {m:,} clients ({size / 2**20:.1f} MiB Parquet, written in "
          f"{t_write:.2f} s); {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'step':<10} {'seconds':>8} {'floor s':>8}  floor")
    for name, (t, floor, what) in steps.items():
        print(f"{name:<10} {t:8.3f} {floor:8.3f}  {what}")
    result = {"rows": n, "clients": m, "features": args.features, "parquet_bytes": size, "repeat": args.repeat,
              "cpus": os.cpu_count(), "load_average": os.getloadavg()[0],
              "steps": {k: {"seconds": t, "floor_seconds": f, "floor": w} for k, (t, f, w) in steps.items()}}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.md:
        command = " ".join(["python benchmarks/bench_partition.py", *(argv if argv is not None else sys.argv[1:])])
        Path(args.md).write_text(markdown(result, command))
    return result


def markdown(result: dict, command: str) -> str:
    """The benchmark's page: what was timed, each step's seconds beside its physical floor, and the command."""
    rows = [f"| {name} | {v['seconds']:.3f} | {v['floor_seconds']:.3f} | {v['floor']} |"
            for name, v in result["steps"].items()]
    natural = result["steps"]["natural"]["seconds"]
    return "\n".join([
        "# Partitioning a local file over simulated clients (issue 48)", "",
        f"A Parquet file of {result['rows']:,} rows x {result['features']} features with a writer-id column of "
        f"{result['clients']:,} distinct values ({result['parquet_bytes'] / 2**20:.1f} MiB), read with "
        "`zofl.tasks.sources.read_local` and split over the clients by `zofl.tasks.sources.partition` "
        "(flwr-datasets' partitioners), each step next to its physical floor (numpy or pyarrow alone). The best of "
        f"{result['repeat']} repeats; {result['cpus']} CPUs, load average {result['load_average']:.1f} at the end.",
        "", "| step | seconds | floor (s) | floor |", "|---|---|---|---|", *rows, "",
        f"The target, the natural partition of {result['rows']:,} rows for {result['clients']:,} clients under 10 s: "
        f"{natural:.2f} s. Made with (the figures: benchmark-partition.json):", "", "```bash", command, "```", ""])


if __name__ == "__main__":
    main()
