"""Write docs/results/table1.md: the project's Table I next to the paper's, cell by cell.

    python experiments/table1_report.py RESULTS_DIR [GRID.toml] [--controls CONTROLS_DIR ...]
        [--against OTHER_DIR] > docs/results/table1.md
    python experiments/table1_report.py RESULTS_DIR --with MORE_DIR ... --controls ... --summary

--summary prints one compact table instead (the one-screen summary of docs/results/README.md): a column
per dataset and setting, the methods' and controls' last-10% accuracy and what each method adds over
f1-only at ZO-HFL's gamma of that column, paired by seed; --with adds more methods' folders (other
datasets, more seeds of the same cells: a seed's row read later replaces an earlier one).

Reads RESULTS_DIR/results.csv (written by ``python -m zofl.compare``) and, with --controls, the
controls' results.csv (experiments/table1_controls.toml); with --against, the same cells run another
way (other steps, another x_0), for paired differences by seed. A cell not finished yet is shown as such;
no number is ever filled in from anywhere else.
"""
from __future__ import annotations

import argparse
import csv
import tomllib
from pathlib import Path

from table1_tuning_report import STEP_KEYS  # the keys the tuning grid varies (a script beside this one)

from zofl.config import KEY_BY_NAME, defaults
from zofl.methods import METHODS
from zofl.stats import fmt_interval, interval, paired

# The ZO-HFL paper's Table I (test accuracy %), as printed there (Qiu, Kim, Yousefian: "A Randomized
# Zeroth-Order Hierarchical Framework for Heterogeneous Federated Learning").
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
# The keys listed per method: those of its algorithm (its params), then the data and start it shares.
RELEVANT = {s: METHODS[s].server.params + ("batch-size", "x0", "x0-epochs", "x0-lr")
            for s in ("zohfl", "fedavg", "fedprox", "scaffold")}


CONTROLS = {"x0-only": "x_0 only", "f1-only": "f1 only (ZO-HFL's server steps, no clients)",
            "server-sgd": "server SGD (server's data alone)", "centralised": "centralised SGD (all data: ceiling)"}


def _read(path: Path) -> list[dict]:
    return list(csv.DictReader(open(path / "results.csv"))) if (path / "results.csv").exists() else []


def _by_cell(rows: list[dict]) -> dict[tuple, dict[int, dict]]:
    """(strategy, dataset, alpha, beta) -> seed -> row."""
    cells: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        cells.setdefault((r["strategy"], r["dataset"], float(r["alpha"]), float(r["beta"])), {})[int(r["seed"])] = r
    return cells


def _gamma(r: dict) -> str:
    """A run's gamma as the controls are keyed (the default when its results.csv has no column)."""
    return f"{float(r.get('gamma') or defaults()['gamma']):g}"


def _step(r: dict) -> str:
    """A control's step: local-lr of server-sgd / centralised, gamma of f1-only, "" for x0-only."""
    if r["strategy"] in ("server-sgd", "centralised"):
        return r.get("local-lr", "")
    return _gamma(r) if r["strategy"] == "f1-only" else ""


def _pm(t: tuple, digits: int = 2) -> str:
    return fmt_interval((100 * t[0], 100 * t[1], t[2]), 1.0, digits) if t[2] else "-"


def _figure(runs: dict[int, dict], key: str) -> dict[int, float]:
    """seed -> the runs' value of ``key`` (a results.csv column), where the run has one."""
    return {s: float(r[key]) for s, r in runs.items() if r.get(key) not in (None, "")}


def _reference(ctrl: dict, c: str, ds: str) -> dict[int, float]:
    """The last-10% accuracies by seed of control c (server-sgd or centralised) on ds: of its steps, the
    one run with the most seeds (the tuned step, re-run with every seed), ties broken by the higher mean."""
    cands = [_figure(runs, "last10_test_acc") for (cc, cds, _), runs in ctrl.items() if cc == c and cds == ds]
    return max(cands, key=lambda v: (len(v), sum(v.values()) / max(len(v), 1)), default={})


def _f1_own(got: dict, ctrl: dict, ds: str, alpha: float, beta: float) -> dict[int, float]:
    """The f1-only control's last-10% accuracies by seed at ZO-HFL's gamma in cell (ds, alpha, beta)."""
    gamma = _gamma(next(iter(got.get(("zohfl", ds, alpha, beta), {}).values()), {}))
    return _figure(ctrl.get(("f1-only", ds, gamma), {}), "last10_test_acc")


def _summary(got: dict, ctrl: dict, datasets: tuple) -> None:
    """The compact table: one column per (dataset, setting) with runs, last-10% accuracy (%), mean +- 95%."""
    cols = [(ds, a, b) for ds in datasets for a, b in SETTINGS if any(got.get((s, ds, a, b)) for s in NAMES)]
    short = {"mnist": "MNIST", "fashion_mnist": "Fashion", "cifar10": "CIFAR-10"}

    def pm(t: tuple) -> str:
        return "" if not t[2] else f"{100 * t[0]:.2f}" if t[2] == 1 else f"{100 * t[0]:.2f} +- {100 * t[1]:.2f}"

    def line(name: str, cells: list[str]) -> None:
        print(f"| {name} | " + " | ".join(cells) + " |")

    line("", [f"{short.get(ds, ds)} ({a:g}, {int(100 * b)}%)" for ds, a, b in cols])
    print("|---|" + "---|" * len(cols))
    for s in ("zohfl", "fedavg", "fedprox", "scaffold"):
        line(NAMES[s], [pm(interval(_figure(got.get((s, ds, a, b), {}), "last10_test_acc").values()))
                        for ds, a, b in cols])
        if s == "zohfl":
            line("ZO-HFL, paper", [f"{PAPER['zohfl'][(a, b)][DATASETS.index(ds)]:.2f}" if ds in DATASETS else "-"
                                   for ds, a, b in cols])
    line("*x_0 only*", [pm(interval(_figure(ctrl.get(("x0-only", ds, ""), {}), "last10_test_acc").values()))
                        for ds, a, b in cols])
    line("*f1-only (ZO-HFL's gamma)*", [pm(interval(_f1_own(got, ctrl, ds, a, b).values()))
                                        for ds, a, b in cols])
    line("*server-only SGD*", [pm(interval(_reference(ctrl, "server-sgd", ds).values())) for ds, a, b in cols])
    line("*centralised SGD (ceiling)*", [pm(interval(_reference(ctrl, "centralised", ds).values()))
                                         for ds, a, b in cols])
    for s in ("zohfl", "fedavg", "fedprox", "scaffold"):
        line(f"{NAMES[s]} adds", [pm(paired(_figure(got.get((s, ds, a, b), {}), "last10_test_acc"),
                                            _f1_own(got, ctrl, ds, a, b))) for ds, a, b in cols])
    line("seeds (n, methods)", [str(len(got.get(("zohfl", ds, a, b), {}))) for ds, a, b in cols])


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="results folder of the methods' grid (results.csv)")
    ap.add_argument("grid", type=Path, nargs="?", default=Path(__file__).with_name("table1.toml"))
    ap.add_argument("--controls", type=Path, nargs="+", default=[],
                    help="results folders of the controls' grids (table1_controls.toml, table1_controls_sgd.toml)")
    ap.add_argument("--against", type=Path, default=None,
                    help="results folder of the same cells run another way (e.g. docs/results/table1, the default "
                         "steps): adds the column 'this - that', paired by seed")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma list of the datasets to show")
    ap.add_argument("--with", dest="more", type=Path, nargs="+", default=[],
                    help="more results folders of methods' grids, read with RESULTS (other datasets, more seeds)")
    ap.add_argument("--summary", action="store_true", help="print the compact one-screen table only")
    return ap.parse_args()


def _intro(spec: dict, datasets: tuple, against: Path | None) -> None:
    """The page's title and the paragraphs that say what every column means."""
    p = print
    p("# Table I regenerated: ZO-HFL, FedAvg, FedProx, SCAFFOLD, with controls\n")
    p("Test accuracy (%) after R = 500 rounds, tau = 20, m = 10 clients, Dirichlet(alpha) split, beta = fraction")
    p("of clients sampled per round. Every entry: mean +- the half-width of the 95% t interval over the seeds")
    p("run (n = their number; n = 1: no interval). **final** = the last round; **last 10%** = the mean over")
    p("rounds 451-500 of each run (a final-round snapshot of a curve that swings decides nothing). All methods")
    if spec.get("fixed", {}).get("x0", defaults()["x0"]) == "zeros":
        p("start from the same x_0 = 0 (the zero model, `x0 = zeros`; the controls too),")
    else:
        p("start from the same x_0 (one SGD epoch on the server's 30% of the training data, `x0 = pretrained`),")
        scaled = sorted({(c["dataset"], c.get("x0-lr")) for c in spec.get("grid", {}).get("cell", [])
                         if c.get("standardize") and c.get("dataset") in datasets})
        if scaled:
            p("on standardized inputs with x0-lr " + ", ".join(f"{lr:g} ({ds})" for ds, lr in scaled) + ",")
    p("sample the same clients per round for a seed, and give every sampled client the same local work")
    p("(2 H_{i,r} SGD steps). The paper does not say how its baselines were started or tuned.\n")
    p("**What the federated part adds**: `- f1 only` is each run minus the f1-only control of the same seed")
    p("(ZO-HFL's own server steps on the server's data with no client term, at ZO-HFL's gamma; for the")
    p("baselines, which take no server steps on f1, it is the gain over a server that runs ZO-HFL's steps alone")
    p(f"with the paper's gamma = {defaults()['gamma']:g}, or ZO-HFL's gamma of the same cell where that control was")
    p("not run), and `- x_0` the same")
    p("against x_0 alone; `- server SGD` against server-only SGD on the server's data (the same rounds, its")
    p("tuned step), `- ceiling` against centralised SGD on all training data, `- ZO-HFL` a baseline against")
    p("ZO-HFL in the same cell (for the SGD controls, the step run with the most seeds: their tuned one);")
    p("paired over seeds, last-10% means, in points. An interval that contains 0 is below the noise.\n")
    if against:
        p(f"`- {against.name}`: each run minus the run of the same cell and seed in {against} (its "
          "results.csv), last-10% means, in points.\n")


def _setting_rows(got: dict, ctrl: dict, other: dict, ds: str, alpha: float, beta: float, refs: tuple,
                  vs: bool) -> None:
    """One dataset's rows of a setting's table: the four methods, then the controls run on that dataset."""
    p = print
    j = DATASETS.index(ds)
    x0 = _figure(ctrl.get(("x0-only", ds, ""), {}), "last10_test_acc")
    f1_own = _f1_own(got, ctrl, ds, alpha, beta)
    # the baselines, which take no server steps on f1, against the paper's gamma; where that control
    # was not run (CIFAR-10, whose steps are scaled to the data), against ZO-HFL's gamma in this cell
    f1_default = _figure(ctrl.get(("f1-only", ds, _gamma({})), {}), "last10_test_acc") or f1_own
    sgd, ceiling = refs
    zohfl = _figure(got.get(("zohfl", ds, alpha, beta), {}), "last10_test_acc")
    for s in ("fedavg", "fedprox", "scaffold", "zohfl"):
        runs = got.get((s, ds, alpha, beta), {})
        last = _figure(runs, "last10_test_acc")
        f1 = f1_own if s == "zohfl" else f1_default  # ZO-HFL against its own server steps alone
        p(f"| {NAMES[s]} | {ds} | {_pm(interval(_figure(runs, 'final_test_acc').values()))} | "
          f"{_pm(interval(last.values()))} | {PAPER[s][(alpha, beta)][j]:.2f} | "
          f"{_pm(paired(last, x0)) if x0 else '-'} | {_pm(paired(last, f1)) if f1 else '-'} | "
          f"{_pm(paired(last, sgd)) if sgd else '-'} | {_pm(paired(last, ceiling)) if ceiling else '-'} | "
          f"{_pm(paired(last, zohfl)) if zohfl and s != 'zohfl' else ''} |"
          + (f" {_pm(paired(last, _figure(other.get((s, ds, alpha, beta), {}), 'last10_test_acc')))} |"
             if vs else ""))
    for (c, cds, lr), runs in sorted(ctrl.items(), key=lambda kv: (list(CONTROLS).index(kv[0][0]), kv[0][2])):
        name = CONTROLS[c] + (f", {'gamma' if c == 'f1-only' else 'local-lr'} {lr}" if lr else "")
        if cds == ds and runs:
            last = _figure(runs, "last10_test_acc")
            gain = _pm(paired(last, x0)) if x0 and c != "x0-only" else ""
            to_ceiling = _pm(paired(last, ceiling)) if ceiling and c != "centralised" else ""
            p(f"| *{name}* | {ds} | {_pm(interval(_figure(runs, 'final_test_acc').values()))} | "
              f"{_pm(interval(last.values()))} | | {gain} | | | {to_ceiling} | |" + (" |" if vs else ""))


def _runs_table(rows: list[dict], ctrl_rows: list[dict], spec: dict, datasets: tuple) -> list:
    """The table of every run read; returns the grid's seeds."""
    p = print
    p("## Runs\n")
    p("| method | dataset | alpha | beta | seed | x_0 acc | final acc | last 10% | best acc | wall (s) "
      "| local SGD steps | cell |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows + ctrl_rows, key=lambda r: (r["dataset"], r["strategy"], r["alpha"], r["beta"], r["seed"])):
        x0 = r.get("x0_test_acc") or ""
        last = r.get("last10_test_acc") or ""
        p(f"| {NAMES.get(r['strategy'], r['strategy'])} | {r['dataset']} | {r['alpha']} | {r['beta']} | {r['seed']} | "
          f"{100 * float(x0) if x0 else float('nan'):.2f} | {100 * float(r['final_test_acc']):.2f} | "
          f"{100 * float(last) if last else float('nan'):.2f} | {100 * float(r['best_test_acc']):.2f} | "
          f"{r['wall_s']} | {r['local_steps']} | `{r['cell']}` |")
    seeds = spec.get("grid", {}).get("seed", [0])
    total = len(datasets) * len(SETTINGS) * 4 * len(seeds)
    p(f"\n{len(rows)} of {total} method cells finished (seeds {seeds}); {len(ctrl_rows)} control cells.\n")
    return seeds


def _hyperparameters(spec: dict, seeds: list) -> None:
    """Each method's keys: the paper's, the fixed ones and the tuned ones, and the tuned steps per cell."""
    p = print
    p("## Hyperparameters\n")
    fixed = {**defaults(), **spec.get("fixed", {})}
    p(f"Common: {', '.join(f'{k} = {fixed[k]}' for k in ('tau', 'num-rounds', 'num-clients', 'server-fraction'))}; "
      f"seeds {seeds}.\n")
    # a grid written by table1_tuning_report.py: steps per cell (a grid of plain cells, as table1_zeros.toml, has none)
    tuned = [{**spec.get("fixed", {}), **c} for c in spec.get("grid", {}).get("cell", [])
             if c.get("strategy") in NAMES and any(k in c for k in ("gamma", "local-lr", "server-lr"))]
    for s in ("zohfl", "fedavg", "fedprox", "scaffold"):
        vals = {**fixed, **spec.get("strategy", {}).get(s, {})}
        picked = [c for c in tuned if c.get("strategy") == s]
        # "tuned": only the keys the tuning grid varies (table1_tuning_report.STEP_KEYS); a key the cells set to
        # one value the grid did not vary (CIFAR-10's client-lr and x0-lr, scaled to the data) is "fixed"
        steps = {k for c in picked for k in c} & set(STEP_KEYS[s])
        per_cell = {k: sorted({c[k] for c in picked if k in c}) for k in RELEVANT[s]
                    if k not in steps and any(k in c for c in picked)}

        def value(k: str) -> str:
            if k in steps:
                return "tuned"
            if k in per_cell:
                return " / ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in per_cell[k]) + " (fixed)"
            return f"{vals[k]}" + (" (paper)" if KEY_BY_NAME[k].source == "paper" else "")

        p(f"- {NAMES[s]}: " + ", ".join(f"{k} = {value(k)}" for k in RELEVANT[s]))
    if tuned:
        p("\nTuned per dataset and setting (experiments/table1_tuning_report.py: the best of the tuning grid's "
          "configurations by last-10% test accuracy on seed 100, R = 200, the same number for every method: 4; "
          "8 in experiments/table1_tuning_wide.toml, 6 in experiments/table1_tuning_cifar_wide.toml; in (0.1, 10%) "
          "FedAvg's and FedProx's, and SCAFFOLD's on MNIST and Fashion-MNIST, from "
          "experiments/table1_tuning_small*.toml: 12 on MNIST and Fashion-MNIST, 10 on CIFAR-10):\n")
        p("| method | dataset | alpha | beta | steps |")
        p("|---|---|---|---|---|")
        for c in tuned:
            steps = ", ".join(f"{k} {v:g}" for k, v in c.items() if k in ("gamma", "local-lr", "server-lr"))
            extra = ", standardized inputs, x0-lr " + f"{c['x0-lr']:g}" if c.get("standardize") else ""
            p(f"| {NAMES[c['strategy']]} | {c['dataset']} | {c['alpha']:g} | {c['beta']:g} | {steps}{extra} |")


def _command(args: argparse.Namespace) -> None:
    """The commands that make the page."""
    p = print
    out, grid_path = args.results, args.grid
    p("\n## Command\n")
    p("```bash")
    p(f"python -m zofl.compare {grid_path} --out {out} --via inprocess --set 'data-dir=\"/abs/path/to/npz\"'")
    for d in args.controls:  # a controls folder is named after its grid file (or is the results folder itself)
        if d != out:
            p(f"python -m zofl.compare experiments/{d.name}.toml --out {d} --via inprocess "
              "--set 'data-dir=\"/abs/path/to/npz\"'")
    extra = (f" --controls {' '.join(map(str, args.controls))}" if args.controls else "") + \
        (f" --against {args.against}" if args.against else "") + \
        (f" --datasets {args.datasets}" if args.datasets != ",".join(DATASETS) else "")
    p(f"python experiments/table1_report.py {out} {grid_path}{extra} > docs/results/{out.name}.md")
    p("```")


def main() -> None:
    args = _args()
    datasets = tuple(d for d in args.datasets.split(",") if d)
    spec = tomllib.loads(args.grid.read_text())
    rows = [r for d in (args.results, *args.more) for r in _read(d) if r["strategy"] in NAMES
            and r["dataset"] in datasets and (float(r["alpha"]), float(r["beta"])) in SETTINGS]  # Table I's cells only
    ctrl_rows = [r for d in args.controls for r in _read(d) if r["strategy"] in CONTROLS and r["dataset"] in datasets]
    got = _by_cell(rows)
    other = _by_cell(_read(args.against) if args.against else [])
    vs = f" - {args.against.name} (last 10%) |" if args.against else ""
    # (control, dataset, its step: local-lr for the SGD controls, gamma for f1-only, "" for x0-only)
    # -> seed -> row
    ctrl: dict[tuple, dict[int, dict]] = {}
    for r in ctrl_rows:
        ctrl.setdefault((r["strategy"], r["dataset"], _step(r)), {})[int(r["seed"])] = r

    if args.summary:
        _summary(got, ctrl, datasets)
        return
    _intro(spec, datasets, args.against)
    # per dataset, the SGD controls each run is paired with (they do not depend on the setting)
    refs = {ds: (_reference(ctrl, "server-sgd", ds), _reference(ctrl, "centralised", ds)) for ds in datasets}
    for alpha, beta in SETTINGS:
        print(f"## (alpha, beta) = ({alpha:g}, {int(beta * 100)}%)\n")
        print("| method | dataset | final | last 10% | paper | - x_0 | - f1 only | - server SGD | - ceiling "
              "| - ZO-HFL |" + vs)
        print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if vs else ""))
        for ds in datasets:
            _setting_rows(got, ctrl, other, ds, alpha, beta, refs[ds], bool(vs))
        print("")
    seeds = _runs_table(rows, ctrl_rows, spec, datasets)
    _hyperparameters(spec, seeds)
    _command(args)

if __name__ == "__main__":
    main()
