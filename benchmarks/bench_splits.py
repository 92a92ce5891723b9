"""Benchmark: a run's split, made by every process (split-cache = false) or made once and memory-mapped.

    python benchmarks/bench_splits.py --data-dir DIR [--dataset mnist] [--clients 1000 10000] [--out FILE.json]

For each number of clients, three fresh Python processes (what a server or a Ray actor is) each time how long
``splits_of`` takes to give the split, after the dataset itself is loaded (timed apart: the physical floor of a
process that must read the data anyway): without the cache; with it, the first time (an empty splits folder:
the split is made and stored); and again (the stored file mapped and checked). The data-dir's dataset is
copied into a temporary folder, so the user's splits folder is never touched. Prints a markdown table; ``--out``
writes the figures as JSON.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ONE = """
import json, logging, sys, time
t0 = time.perf_counter()
from zofl.tasks.base import DataSpec, pooled_of, splits_of
from zofl.tasks.data import file_stamp
imported = time.perf_counter() - t0
a = json.loads(sys.argv[1])
spec = DataSpec(dataset=a["dataset"], data_dir=a["dir"], num_clients=a["m"], min_partition_size=a["min"],
                stamp=file_stamp(a["dataset"], a["dir"]), cache=a["cache"])
t1 = time.perf_counter(); pooled_of(spec); load = time.perf_counter() - t1
moved = []
class Moved(logging.Handler):
    def emit(self, record):
        moved.append(record.args[3] if "moved" in record.msg else None)
logging.getLogger("zofl").addHandler(Moved())
t2 = time.perf_counter(); s = splits_of(spec); split = time.perf_counter() - t2
sizes = [len(c) for c in s.clients]
print(json.dumps({"import_s": imported, "load_s": load, "split_s": split, "min_size": min(sizes),
                  "moved": next((m for m in moved if m is not None), 0), "fingerprint": s.fingerprint()}))
"""


def _one(dataset: str, folder: str, m: int, min_size: int, cache: bool) -> dict:
    arg = json.dumps({"dataset": dataset, "dir": folder, "m": m, "min": min_size, "cache": cache})
    res = subprocess.run([sys.executable, "-c", ONE, arg], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure(dataset: str, data_dir: Path, m: int, min_size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(data_dir / f"{dataset}.npz", tmp)
        off = _one(dataset, tmp, m, min_size, False)
        first = _one(dataset, tmp, m, min_size, True)
        again = _one(dataset, tmp, m, min_size, True)
        size = sum(p.stat().st_size for p in (Path(tmp) / "splits").glob("*.npy"))
    same = off["fingerprint"] == first["fingerprint"] == again["fingerprint"]
    return {"clients": m, "load_s": again["load_s"], "no_cache_s": off["split_s"], "first_s": first["split_s"],
            "again_s": again["split_s"], "index_bytes": size, "same_split": same, "min_size": again["min_size"],
            "moved": off["moved"]}


def table(rows: list[dict]) -> str:
    out = ["| clients | data load (floor) | split, no cache | first time (made, stored) | again (mapped) | "
           "index file | same split | smallest client | moved by top-up |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['clients']:,} | {r['load_s']:.2f} s | {r['no_cache_s']:.2f} s | {r['first_s']:.2f} s | "
                   f"{r['again_s']:.3f} s | {r['index_bytes'] / 1024:,.0f} KiB | {'yes' if r['same_split'] else 'NO'}"
                   f" | {r['min_size']} | {r['moved']:,} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, type=Path)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--clients", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--min-partition-size", type=int, default=10)
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    rows = [measure(args.dataset, args.data_dir.expanduser().resolve(), m, args.min_partition_size)
            for m in args.clients]
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps({"dataset": args.dataset, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
