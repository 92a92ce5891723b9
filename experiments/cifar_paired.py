"""Paired differences (last-10% means, points, 95% interval over seeds) of each CIFAR-10 Table I run against
the controls of another folder and against ZO-HFL in the same setting: the numbers the CIFAR-10 readings in
docs/results/README.md quote beside table1_tuned_cifar.md's columns.
  python experiments/cifar_paired.py docs/results/table1_tuned_cifar docs/results/table1_controls_cifar"""
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from zofl.stats import fmt_interval, paired  # noqa: E402


def by_key(path: Path, key) -> dict:
    out: dict = {}
    for r in csv.DictReader(open(path / "results.csv")):
        out.setdefault(key(r), {})[int(r["seed"])] = 100 * float(r["last10_test_acc"])
    return out


runs = by_key(Path(sys.argv[1]), lambda r: (r["strategy"], float(r["alpha"]), float(r["beta"])))
ctrl = by_key(Path(sys.argv[2]), lambda r: r["strategy"])
for (s, a, b), v in sorted(runs.items()):
    vs = [f"- {c} {fmt_interval(paired(v, ctrl[c]))}" for c in ("server-sgd", "centralised") if c in ctrl]
    if s != "zohfl" and ("zohfl", a, b) in runs:
        vs.append(f"- zohfl {fmt_interval(paired(v, runs[('zohfl', a, b)]))}")
    print(f"{s} ({a:g}, {b:g}): " + "; ".join(vs))
