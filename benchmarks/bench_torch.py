"""Local SGD steps per second: the numpy softmax (the paper's model), the same model in torch, and
the built-in CNN, on MNIST-sized inputs (784 features, 10 classes, batch 32), one process, CPU.

    python benchmarks/bench_torch.py [--data-dir DIR] [--steps 2000] [--repeats 5] [--out docs/benchmark-torch.json]

Each repeat times ``steps`` gradient steps x <- x - 0.1 grad on minibatches of a client of the
App's split (MNIST from DIR/mnist.npz if present, else digits padded to 784 features), the three
tasks interleaved so they share the machine's conditions; the table gives the median steps/s and
the ratio to the numpy softmax measured in the same repeat. Floor: the pure compute of one
softmax step is two (32 x 784) x (784 x 10) products, about 1 MFLOP; the CNN's forward and
backward are about 30x that.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from zofl.setup import prepare

TASKS = ("softmax", "torch-softmax", "cnn")


def data(data_dir: str):
    if (Path(data_dir).expanduser() / "mnist.npz").exists():
        _, task, spec = prepare({"dataset": "mnist", "data-dir": data_dir})
        return task.client_data(spec, 0), "mnist"
    _, task, spec = prepare({})
    d = task.client_data(spec, 0)
    x = np.zeros((len(d), 784), dtype=np.float32)
    x[:, :64] = d.x
    return type(d)(x, d.y, 10), "digits padded to 784 features"


def time_steps(task, d, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    params = task.init_params(d.x.shape[1], d.num_classes)
    batches = rng.integers(0, len(d), size=(steps, 32))
    t = time.perf_counter()
    for idx in batches:
        params = params - 0.1 * task.grad(params, d.x[idx], d.y[idx])
    return steps / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/zofl-data")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    d, source = data(args.data_dir)
    tasks = {}
    for name in TASKS:
        cfg = {"task": name, "dataset": "digits"}
        _, task, _ = prepare(cfg)
        if hasattr(task, "_module"):
            task._module = None  # configure() built it for digits' 64 features: rebuild for 784
        task.init_params(d.x.shape[1], d.num_classes)
        tasks[name] = task
    runs = {name: [] for name in TASKS}
    for rep in range(args.repeats):
        for name, task in tasks.items():
            runs[name].append(time_steps(task, d, args.steps if name != "cnn" else args.steps // 4, rep))
    result = {"data": source, "steps": args.steps, "repeats": args.repeats, "torch": torch.__version__,
              "torch_threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
              "steps_per_s": {n: statistics.median(v) for n, v in runs.items()},
              "ratio_to_numpy": {n: statistics.median([a / b for a, b in zip(v, runs["softmax"])])
                                 for n, v in runs.items()},
              "n_params": {n: int(t.init_params(d.x.shape[1], d.num_classes).size) for n, t in tasks.items()}}
    print(f"data: {source}; batch 32; median of {args.repeats} repeats; torch {torch.__version__} "
          f"({result['torch_threads']} threads)")
    print("| task | parameters | local steps / s | ratio to the numpy softmax (same repeat) |")
    print("|---|---|---|---|")
    for n in TASKS:
        print(f"| {n} | {result['n_params'][n]} | {result['steps_per_s'][n]:.0f} | {result['ratio_to_numpy'][n]:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
