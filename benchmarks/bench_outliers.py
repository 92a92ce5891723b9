"""Benchmark: the outlier diagnostic's cost per round (``zofl.algorithms.outliers.far_replies``; issue 51, item 3).

    python benchmarks/bench_outliers.py [--replies 100 1000] [--dim 7850] [--repeats 5] [--test-rows 7000]
                                        [--out FILE.json]

Every synchronous round (``SyncRun.outliers``) and every asynchronous update (``AsyncRun._apply``) passes its
accepted replies to ``far_replies``. Here, for each ``--replies`` n: n random replies of ``--dim`` values (the size
of MNIST's logistic regression, 785 x 10: one of them hostile, 100 times the others' spread), timed as

* ``far_replies`` of updates (replies as sent: ZO-HFL's vectors, FedBuff's deltas, SCAFFOLD's), and of models
  minus the model each client was sent (FedAvg's, FedProx's: ``sent`` given);
* beside them, for scale: the coordinate-wise median alone (the statistic's floor: the diagnostic's centre), the
  plain mean of the same replies (what ``aggregation = "mean"`` computes of them), and one server test pass of a
  softmax regression of that size on ``--test-rows`` rows (what ``eval-every`` spaces out: ``zofl.core.evaluation``).

Each figure is the median of ``--repeats`` calls (after one untimed call), wall time (``time.perf_counter``).
``far_replies`` is vectorised with numpy: per group of replies one (n, d) matrix, its column medians and its row
norms, O(n d); the one Python loop builds each reply's vector (a reply is a mapping of named arrays). There is no
pairwise distance. Its results are exact (nothing is sampled).

Measured on this project's 2-core machine (x86_64, Python 3.11.7, numpy with OpenBLAS 0.3.31), 2026-11-29, beside a
study at nice 19 and other work (1-minute load 4.5: the figures are wall times on a shared machine), with

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_outliers.py --repeats 7 --out docs/benchmark-outliers.json

    replies  dim    far_replies (updates)  (models)  median alone  mean aggregate  test pass (7000 rows)
    100      7850   43 ms                  43 ms     21 ms         0.2 ms          30 ms
    1000     7850   0.33 s                 0.34 s    0.20 s        8 ms            39 ms

(at load 2.6, an earlier probe of the same calls: 22 ms for 100 replies, 0.22 s for 1,000). The cost grows as
n x d, 40 to 55 ns per reply value here (28 ns at load 2.6); half of it or more is the coordinate-wise median. It
is about one test pass at 100 replies and 8 of them at 1,000, and 40 (1,000 replies) to 200 (100 replies) times
the plain mean of the same replies.
Nothing was changed in ``far_replies`` (before = after): it was vectorised already, and the rewrites that keep its
results bit for bit (the vectors written straight into one preallocated matrix, ``np.partition`` in place of
``np.median``) saved about 15% at most at 1,000 replies. The smallest setting (``--replies 3 5 --dim 20 --repeats 1
--test-rows 50``) runs in a second.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

CLASSES = 10  # the softmax regression of the test pass: dim / CLASSES features


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``fn``, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def replies_of(n: int, dim: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """n replies {"x": dim values} around a common update, reply 0 hostile (100 x the spread), and the models each
    client was sent ({"x": ...}, for the replies read as models)."""
    rng = np.random.default_rng(seed)
    centre = rng.standard_normal(dim)
    replies = [{"x": centre + 0.1 * rng.standard_normal(dim)} for _ in range(n)]
    replies[0] = {"x": centre + 10.0 * rng.standard_normal(dim)}
    sent = [{"x": np.ones(dim)} for _ in range(n)]
    return replies, sent


def test_pass_s(dim: int, rows: int, repeats: int) -> float:
    """One server test pass (test loss and accuracy, ``zofl.tasks.evaluate``) of a softmax regression of ``dim``
    parameters on ``rows`` random float32 rows."""
    from zofl.tasks.base import evaluate
    from zofl.tasks.data import ArrayData
    from zofl.tasks.softmax import SoftmaxTask

    rng = np.random.default_rng(1)
    features = max(1, dim // CLASSES)
    data = ArrayData(rng.standard_normal((rows, features), dtype=np.float32), rng.integers(0, CLASSES, rows), CLASSES)
    params = 0.01 * rng.standard_normal(features * CLASSES)
    task = SoftmaxTask()
    return _median_s(lambda: evaluate(task, params, data), repeats)


def measure(n: int, dim: int, repeats: int, rows: int) -> dict:
    """The figures of one size (seconds), and which replies were flagged (reply 0, the hostile one)."""
    from zofl.algorithms.outliers import far_replies

    replies, sent = replies_of(n, dim)
    u = np.stack([r["x"] for r in replies])
    return {"replies": n, "dim": dim, "flagged": far_replies(replies),
            "far_replies_updates_s": _median_s(lambda: far_replies(replies), repeats),
            "far_replies_models_s": _median_s(lambda: far_replies(replies, sent), repeats),
            "median_alone_s": _median_s(lambda: np.median(u, axis=0), repeats),
            "mean_aggregate_s": _median_s(lambda: np.mean(u, axis=0), repeats),
            "test_pass_s": test_pass_s(dim, rows, repeats), "test_rows": rows}


def _ms(s: float) -> str:
    return f"{1000 * s:.1f} ms" if s < 1 else f"{s:.2f} s"


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replies", type=int, nargs="+", default=[100, 1000], help="replies per round, each a size")
    ap.add_argument("--dim", type=int, default=7850, help="values per reply (MNIST logistic regression: 7850)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per figure (the median is reported)")
    ap.add_argument("--test-rows", type=int, default=7000, help="rows of the test pass shown for scale")
    ap.add_argument("--out", type=Path, help="write the figures to this JSON file")
    args = ap.parse_args(argv)
    if min(args.replies) < 3 or args.dim < 1 or args.repeats < 1 or args.test_rows < 1:
        ap.error("--replies >= 3 (fewer are never judged), --dim, --repeats and --test-rows >= 1")
    load = os.getloadavg()[0]  # other processes' share of the cores: the figures are wall times
    rows = []
    print(f"1-minute load before: {load:.1f}; OPENBLAS_NUM_THREADS = {os.environ.get('OPENBLAS_NUM_THREADS')}")
    print("replies  dim    far_replies (updates)  (models)  median alone  mean aggregate  test pass")
    for n in args.replies:
        row = measure(n, args.dim, args.repeats, args.test_rows)
        rows.append(row)
        print(f"{n:<8} {args.dim:<6} {_ms(row['far_replies_updates_s']):<22} {_ms(row['far_replies_models_s']):<9} "
              f"{_ms(row['median_alone_s']):<13} {_ms(row['mean_aggregate_s']):<15} {_ms(row['test_pass_s'])} "
              f"({args.test_rows} rows); flagged: {row['flagged']}", flush=True)
    if args.out:
        command = " ".join(["python benchmarks/bench_outliers.py", *(argv if argv is not None else sys.argv[1:])])
        args.out.write_text(json.dumps({"command": command, "load_1min": load, "openblas_num_threads":
                                        os.environ.get("OPENBLAS_NUM_THREADS"), "rows": rows}, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
