"""Write docs/results/table1.md: the project's Table I next to the paper's, cell by cell.

    python experiments/table1_report.py RESULTS_DIR [GRID.toml] > docs/results/table1.md

Reads RESULTS_DIR/results.csv (written by ``python -m zofl.compare``). A cell not finished yet is
shown as such; no number is ever filled in from anywhere else.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zofl.config import KEY_BY_NAME, defaults  # noqa: E402

# The ZO-HFL paper's Table I (test accuracy %), as transcribed in shared/docs/algorithms.md.
PAPER = {  # method: {(alpha, beta): (MNIST, Fashion-MNIST, CIFAR-10)}
    "fedavg": {(1000.0, 0.9): (87.17, 77.52, 68.36), (1.0, 0.5): (77.33, 59.64, 37.20),
               (0.1, 0.1): (39.19, 45.50, 27.43)},
    "fedprox": {(1000.0, 0.9): (86.90, 77.34, 67.52), (1.0, 0.5): (75.61, 60.28, 38.55),
                (0.1, 0.1): (45.15, 49.44, 29.03)},
    "scaffold": {(1000.0, 0.9): (91.54, 82.25, 72.36), (1.0, 0.5): (91.25, 83.48, 50.41),
                 (0.1, 0.1): (87.36, 74.91, 44.65)},
    "zohfl": {(1000.0, 0.9): (90.82, 78.51, 68.12), (1.0, 0.5): (88.44, 85.51, 58.06),
              (0.1, 0.1): (87.70, 76.86, 52.51)},
}
DATASETS = ("mnist", "fashion_mnist", "cifar10")
NAMES = {"zohfl": "ZO-HFL", "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD"}
SETTINGS = ((1000.0, 0.9), (1.0, 0.5), (0.1, 0.1))
RELEVANT = {
    "zohfl": ("eta", "gamma", "client-lr", "lambda", "mu", "batch-size", "server-batch-size", "directions", "crn",
              "uplink", "weighting", "ball-radius", "x0", "x0-epochs", "x0-lr"),
    "fedavg": ("local-lr", "local-lr-schedule", "server-lr", "batch-size", "x0", "x0-epochs", "x0-lr"),
    "fedprox": ("local-lr", "local-lr-schedule", "server-lr", "prox-mu", "batch-size", "x0", "x0-epochs", "x0-lr"),
    "scaffold": ("local-lr", "local-lr-schedule", "server-lr", "batch-size", "x0", "x0-epochs", "x0-lr"),
}


def main() -> None:
    out = Path(sys.argv[1])
    grid_path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name("table1.toml")
    spec = tomllib.loads(grid_path.read_text())
    rows = list(csv.DictReader(open(out / "results.csv"))) if (out / "results.csv").exists() else []
    rows = [r for r in rows if r["strategy"] in NAMES and r["dataset"] in DATASETS
            and (float(r["alpha"]), float(r["beta"])) in SETTINGS]  # Table I's cells only
    got: dict[tuple, list[dict]] = {}
    for r in rows:
        got.setdefault((r["strategy"], r["dataset"], float(r["alpha"]), float(r["beta"])), []).append(r)

    p = print
    p("# Table I regenerated: ZO-HFL, FedAvg, FedProx, SCAFFOLD\n")
    p("Test accuracy (%) after R = 500 rounds, tau = 20, m = 10 clients, Dirichlet(alpha) split,")
    p("beta = fraction of clients sampled per round; each entry `ours / paper (ours - paper)`.")
    p("Ours is the mean over the seeds run (listed below); '-' = not finished yet.")
    p("All four methods start from the same x_0 (one SGD epoch on the server's 30% of the training data,")
    p("`x0 = pretrained`), sample the same clients per round for a seed, and give every sampled client the")
    p("same local work (2 H_{i,r} SGD steps); the baselines' steps were tuned with as many runs as ZO-HFL's")
    p("open choices (study.md). The paper does not say how its baselines were started or tuned.\n")
    for alpha, beta in SETTINGS:
        p(f"## (alpha, beta) = ({alpha:g}, {int(beta * 100)}%)\n")
        p("| method | MNIST | Fashion-MNIST | CIFAR-10 |")
        p("|---|---|---|---|")
        for s in ("fedavg", "fedprox", "scaffold", "zohfl"):
            cells = []
            for j, ds in enumerate(DATASETS):
                paper = PAPER[s][(alpha, beta)][j]
                runs = got.get((s, ds, alpha, beta), [])
                if runs:
                    ours = 100 * sum(float(r["final_test_acc"]) for r in runs) / len(runs)
                    cells.append(f"{ours:.2f} / {paper:.2f} ({ours - paper:+.2f})")
                else:
                    cells.append(f"- / {paper:.2f}")
            p(f"| {NAMES[s]} | " + " | ".join(cells) + " |")
        p("")
    p("## Runs\n")
    p("| method | dataset | alpha | beta | seed | final acc | best acc | wall (s) | local SGD steps | cell |")
    p("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p(f"| {NAMES.get(r['strategy'], r['strategy'])} | {r['dataset']} | {r['alpha']} | {r['beta']} | {r['seed']} | "
          f"{100 * float(r['final_test_acc']):.2f} | {100 * float(r['best_test_acc']):.2f} | {r['wall_s']} | "
          f"{r['local_steps']} | `{r['cell']}` |")
    total = len(DATASETS) * len(SETTINGS) * 4 * len(spec.get("grid", {}).get("seed", [0]))
    p(f"\n{len(rows)} of {total} cells finished.\n")
    p("## Hyperparameters\n")
    fixed = {**defaults(), **spec.get("fixed", {})}
    p(f"Common: {', '.join(f'{k} = {fixed[k]}' for k in ('tau', 'num-rounds', 'num-clients', 'server-fraction'))}; "
      f"seeds {spec.get('grid', {}).get('seed', [0])}.\n")
    for s in ("zohfl", "fedavg", "fedprox", "scaffold"):
        vals = {**fixed, **spec.get("strategy", {}).get(s, {})}
        p(f"- {NAMES[s]}: " + ", ".join(f"{k} = {vals[k]}" + (" (paper)" if KEY_BY_NAME[k].source == "paper" else "")
                                        for k in RELEVANT[s]))
    p("\n## Command\n")
    p("```bash")
    p(f"python -m zofl.compare {grid_path.relative_to(Path.cwd()) if grid_path.is_absolute() else grid_path} "
      f"--out {out} --set 'data-dir=\"/abs/path/to/npz\"'")
    p(f"python experiments/table1_report.py {out} > docs/results/table1.md")
    p("```")


if __name__ == "__main__":
    main()
