"""AFBO vs FedNest (issue 10, item 5): figures and tables from finished cells, for MNIST hyper-cleaning
and for regularization-coefficient optimization.

    python experiments/afbo_plot.py figures RUNS_DIR [RUNS_DIR ...] --out docs/results/afbo
    python experiments/afbo_plot.py tuning /tmp/afbo-runs/tuning --out docs/results/afbo

Reads every finished cell (config.json + rounds.jsonl + summary.json) under RUNS_DIR/cells. A
*setting* is (task, alpha, stragglers or not); a *line* is a method (strategy, with its step sizes if
several are present; ``outer-lr = 0`` is the control "x fixed at x_0": the lower level alone, the
same method's y steps and clock). Per setting:

* x-axis 1, ``clock_s``: the SIMULATED device time of the records (local steps x sim-step-s / device
  speed + latency-s; a synchronous round lasts as long as its slowest participant). Not machine time.
* x-axis 2, communication: cumulative replies received by the server / m ("client uploads per
  client"). For FedNest with beta = 1 this is exactly the communication round count (every round all
  m clients reply once); for AFBO it counts every G_i and H_i upload (a server step is taken after
  ``buffer-size`` = 2 replies of the current kind, so m / 2 server steps are about one such round).
* Each seed's curve is put on a common grid by zero-order hold (the accuracy of the newest model at
  that x; the last record wins at ties); grid = [0, X] with X the smallest final x over all cells of
  the setting (so every seed of both methods covers it: the same budget for both methods).
* 95% interval: mean +- t_{0.975, n-1} std / sqrt(n) over seeds (std with ddof 1).

Writes to --out: fig_<setting>.png (accuracy vs simulated time | vs communication), table.md
(numbers at the budget, time to reach thresholds, paired AFBO - FedNest differences, and each method
minus its outer-lr = 0 control), summary.json, and references.json (plain softmax SGD on the same
clients' data; hyper-cleaning: noisy labels, clean labels, the clean validation parts alone;
regularization: all clients' data at the starting coefficients, the centralised ceiling; computed
once and cached). Regularization figures have a third panel, test loss against the clock (digits'
test set has 180 examples: accuracy moves in steps of 0.56 points).

Opt-in ``--records``: also writes rounds.parquet, every run's per-round records exactly as read for
the figures, one row per record in long format (setting, method, strategy, cell, seed, alpha, comm_s,
straggler_factor, outer_lr, round, clock_s, comm, test_acc, test_loss, and the task's two weight
columns: mean_log_coef / spread_log_coef for regularization, weight_corrupted / weight_clean for
hyper-cleaning); a missing value (NaN) is null. Parquet through ``zofl.packed.write_table`` (the same
cells give the same bytes). Without the flag nothing changes. Read it back with e.g.
``pandas.read_parquet("rounds.parquet")``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from report_common import band, pm  # a module beside this script

from zofl.figures import save as save_figure
from zofl.stats import interval

GRID_POINTS = 300


# -- reading -----------------------------------------------------------------------------------
def _num(v) -> float:
    """A record's number; null (a NaN as JSON writes it) and a missing field are NaN."""
    return np.nan if v is None else float(v)


def read_cells(dirs: list[Path]) -> list[dict]:
    cells = []
    for root in dirs:
        for d in sorted((root / "cells").glob("*")):
            if not (d / "summary.json").exists():
                continue  # unfinished
            cfg = json.loads((d / "config.json").read_text())
            recs = [json.loads(line) for line in (d / "rounds.jsonl").read_text().splitlines() if line.strip()]
            m = cfg["num-clients"]
            clock, comm, acc, loss, steps, wc, wk, auc = [], [], [], [], [], [], [], []
            replies = 0
            for r in recs:
                replies += r.get("participants", 0) or 0
                if r.get("eval_skipped"):
                    continue  # eval-every > 1: no evaluation in this record (its replies still counted)
                clock.append(float(r.get("clock_s", 0.0)))
                comm.append(replies / m)
                acc.append(_num(r.get("test_acc")))  # a diverged run's NaN is written as null
                loss.append(_num(r.get("test_loss")))
                steps.append(int(r["round"]))
                wc.append(_num(r.get("weight_corrupted", r.get("mean_log_coef"))))
                wk.append(_num(r.get("weight_clean", r.get("spread_log_coef"))))
                auc.append(_num(r.get("weight_auc")))  # hyper-cleaning only
            cells.append(
                {
                    "dir": str(d),
                    "cfg": cfg,
                    "summary": json.loads((d / "summary.json").read_text()),
                    "clock": np.array(clock),
                    "comm": np.array(comm),
                    "acc": np.array(acc),
                    "loss": np.array(loss),
                    "steps": np.array(steps),
                    "w_corrupt": np.array(wc),
                    "w_clean": np.array(wk),
                    "auc": np.array(auc),
                }
            )
    return cells


def is_reg(cfg: dict) -> bool:
    return cfg.get("task") == "regularization"


def has_stragglers(cfg: dict) -> bool:
    """Slow clients named, and slower than the others: by speed-param < 1 (fixed compute slowdown) or by
    straggler-factor > 1 (drawn per task, communication included); speed-param 1 alone is a label only."""
    named = cfg.get("speed-profile") == "slow" and bool(cfg.get("slow-clients"))
    return named and (float(cfg.get("speed-param", 0.2)) < 1 or float(cfg.get("straggler-factor", 1.0)) > 1)


def setting_of(cfg: dict) -> str:
    split = "iid" if cfg["alpha"] >= 100 else f"noniid-alpha{cfg['alpha']:g}"
    strag = "stragglers" if has_stragglers(cfg) else "nostragglers"
    comm = f"_comm{float(cfg['comm-s']):g}" if float(cfg.get("comm-s", 0.0)) > 0 else ""
    return f"{'reg-' + cfg['dataset'] + '_' if is_reg(cfg) else ''}{split}_{strag}{comm}"


def setting_title(s: str, cfg: dict | None = None) -> str:
    """The setting's name in words; with a cell's config, the stragglers and communication as configured."""
    parts = s.split("_")
    comm = parts.pop() if parts[-1].startswith("comm") else ""
    *task, split, strag = parts
    split = "IID (alpha=1000)" if split == "iid" else f"non-IID (Dirichlet alpha={split.split('alpha')[1]})"
    if strag == "stragglers" and cfg is not None:
        n = len(str(cfg.get("slow-clients", "")).split(","))
        f = float(cfg.get("straggler-factor", 1.0))
        strag = (f"{n} of {cfg['num-clients']} clients stragglers (mean time x{f:g}, drawn per task)" if f > 1
                 else f"{n} of {cfg['num-clients']} clients {1 / float(cfg['speed-param']):g}x slower")
    else:
        strag = "5 of 10 clients 5x slower" if strag == "stragglers" else "no stragglers"
    dataset = (cfg or {}).get("dataset", "mnist").upper()
    what = f"{task[0][4:]} regularization coefficients" if task else f"{dataset} hyper-cleaning"
    return f"{what}, {split}, {strag}" + (f", comm-s {comm[4:]} s" if comm else "")


STEP_KEYS = ("outer-lr", "inner-lr", "inner-rounds", "lower-lr", "buffer-size", "beta", "lipschitz-g", "neumann-steps",
             "batch-size", "dual-lr", "cut-normalize")


def is_control(cfg: dict) -> bool:
    return float(cfg.get("outer-lr", 1.0)) == 0.0


def method_of(cfg: dict, vary: dict[str, set[str]]) -> str:
    name = {"afbo": "AFBO (async)", "fednest": "FedNest (sync)", "afbo-global": "afbo-global (ours, async)",
            "adbo": "ADBO (async)"}.get(
        cfg["strategy"], cfg["strategy"])
    keys = [k for k in STEP_KEYS if k in vary.get(cfg["strategy"], set())]
    if is_control(cfg):  # labelled by the lower-level keys that vary between the strategy's cells, if any
        lower = [k for k in keys if k != "outer-lr" and k in cfg]
        return name + ", x fixed (outer-lr=0: control)" + "".join(
            f", {k}={cfg[k]:g}" if isinstance(cfg[k], float) else f", {k}={cfg[k]}" for k in lower)
    return name + (
        " " + ", ".join(f"{k}={cfg[k]:g}" if isinstance(cfg[k], float) else f"{k}={cfg[k]}" for k in keys)
        if keys
        else ""
    )


def varying_step_keys(cells: list[dict]) -> dict[str, set[str]]:
    """Per strategy, the step keys that differ between its cells (then they label its lines)."""
    out = {}
    for strat in {c["cfg"]["strategy"] for c in cells}:
        cs = [c["cfg"] for c in cells if c["cfg"]["strategy"] == strat and not is_control(c["cfg"])]
        out[strat] = {k for k in STEP_KEYS if len({json.dumps(c.get(k)) for c in cs}) > 1}
    return out


# -- statistics --------------------------------------------------------------------------------
def hold(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """y of the last record with x <= grid value (zero-order hold; ties: the last record)."""
    idx = np.searchsorted(x, grid, side="right") - 1
    return y[np.clip(idx, 0, len(y) - 1)]


AUC_TARGET = 0.9  # hyper-cleaning: time until sigma(x) ranks clean above corrupted examples with AUC 0.9


def first_reach(c: dict, thr: float, budget: float, what: str = "acc") -> float:
    ok = np.nonzero((c[what] >= thr) & (c["clock"] <= budget))[0]
    return float(c["clock"][ok[0]]) if len(ok) else np.nan


# -- references (plain softmax SGD in numpy on the same split) -------------------------------------
def softmax_sgd(u: np.ndarray, y: np.ndarray, n_classes: int, l2: float, epochs: int, lr: float,
                batch: int) -> np.ndarray:
    """The linear classifier (weight 1 per example, (l2/2)||W||^2) trained by minibatch SGD from W = 0 (seed 0
    for the order): the average of the iterates of the last epoch."""
    rng = np.random.default_rng(0)
    W = np.zeros((u.shape[1], n_classes))
    avg, k = np.zeros_like(W), 0
    for ep in range(epochs):
        order = rng.permutation(len(y))
        for s in range(0, len(y), batch):
            idx = order[s : s + batch]
            z = u[idx] @ W
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(idx)), y[idx]] -= 1.0
            W -= lr * (u[idx].T @ p / len(idx) + l2 * W)
            if ep == epochs - 1:
                avg, k = avg + W, k + 1
    return avg / k


def references(cfg: dict, epochs: int = 4, lr: float = 0.1, batch: int = 128) -> dict[str, float]:
    """Test accuracy of the same linear classifier (weight 1 per example, (lower-l2/2)||W||^2) trained
    by minibatch SGD on the union of the clients' training parts with the noisy labels ("noisy"), with
    the true labels ("clean": the ceiling of perfect cleaning), and on the clean validation parts
    alone ("val_only": what the clean data give without the training part). The classifier returned
    is the average of the iterates of the last epoch (the last iterate of constant-step SGD on noisy
    labels jumps by tens of points)."""
    from zofl.setup import prepare
    from zofl.tasks.hypergrad import _cleaning_arrays, ce_loss  # noqa: F401

    c, task, spec = prepare({k: v for k, v in cfg.items() if k not in ("output-dir", "run-name")})
    parts = [_cleaning_arrays(spec, i, c.holdout_fraction, c.corruption) for i in range(spec.num_clients)]
    u_tr = np.vstack([p[0] for p in parts])
    noisy = np.concatenate([p[1] for p in parts])
    true = np.concatenate([p[2] for p in parts])
    u_val = np.vstack([p[3] for p in parts])
    y_val = np.concatenate([p[4] for p in parts])
    C = parts[0][5]
    test = task.test_data(spec)
    u_te = np.hstack([test.x, np.ones((len(test), 1))])

    def train(u, y):
        W = softmax_sgd(u, y, C, c.lower_l2, epochs, lr, batch)
        return float(np.mean(np.argmax(u_te @ W, axis=1) == test.y))

    return {
        "noisy": train(u_tr, noisy),
        "clean": train(np.vstack([u_tr, u_val]), np.concatenate([true, y_val])),
        "val_only": train(u_val, y_val),
        "corrupted_share": float(np.mean(noisy != true)),
        "n_train": int(len(noisy)),
        "n_val": int(len(y_val)),
        "n_test": int(len(test.y)),
    }


def references_reg(cfg: dict, epochs: int = 30, lr: float = 0.5, batch: int = 32) -> dict[str, float]:
    """The centralised ceiling of the regularization task: the same classifier with the starting
    coefficients (lower-l2 for every row of W) trained by minibatch SGD on the union of all clients'
    data (training and validation parts); last-epoch average of the iterates."""
    from zofl.setup import prepare
    from zofl.tasks.hypergrad import _labelled_arrays, ce_loss

    c, task, spec = prepare({k: v for k, v in cfg.items() if k not in ("output-dir", "run-name")})
    parts = [_labelled_arrays(spec, i, c.holdout_fraction) for i in range(spec.num_clients)]
    u = np.vstack([np.vstack([p[0], p[2]]) for p in parts])
    y = np.concatenate([np.concatenate([p[1], p[3]]) for p in parts])
    C = parts[0][4]
    test = task.test_data(spec)
    u_te = np.hstack([test.x, np.ones((len(test), 1))])
    W = softmax_sgd(u, y, C, c.lower_l2, epochs, lr, batch)
    return {
        "central": float(np.mean(np.argmax(u_te @ W, axis=1) == test.y)),
        "central_loss": float(np.mean(ce_loss(W, u_te, test.y))),
        "n_train": int(len(y)),
        "n_test": int(len(test.y)),
    }


def reference_key(cfg: dict) -> str:
    key = f"alpha={cfg['alpha']:g},seed={cfg['seed']}"
    return f"{cfg['task']},{cfg['dataset']},{key}" if is_reg(cfg) else key


def reference_table(cells: list[dict], out: Path) -> dict[str, dict]:
    """references() per (task, alpha, seed), cached in out/references.json."""
    path = out / "references.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    for c in cells:
        cfg = c["cfg"]
        key = reference_key(cfg)
        if key not in cache:
            print(f"reference classifiers for {key} ...", flush=True)
            cache[key] = references_reg(cfg) if is_reg(cfg) else references(cfg)
            path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return cache


# -- the per-round records (opt-in: --records) -------------------------------------------------
RECORD_COLUMNS = ("setting", "method", "strategy", "cell", "seed", "alpha", "comm_s", "straggler_factor", "outer_lr",
                  "round", "clock_s", "comm", "test_acc", "test_loss")


def write_records(cells: list[dict], vary: dict[str, set[str]], out: Path, name: str = "rounds.parquet") -> Path:
    """Every cell's records as read for the figures, long format, into out/NAME (deterministic)."""
    from zofl.packed import write_table

    reg = any(is_reg(c["cfg"]) for c in cells)
    wnames = ("mean_log_coef", "spread_log_coef") if reg else ("weight_corrupted", "weight_clean", "weight_auc")
    rows = []

    def num(v) -> float | None:
        v = float(v)
        return None if np.isnan(v) else v

    def key(c: dict) -> tuple:
        return setting_of(c["cfg"]), method_of(c["cfg"], vary), c["cfg"]["seed"], Path(c["dir"]).name

    for c in sorted(cells, key=key):
        cfg = c["cfg"]
        head = [setting_of(cfg), method_of(cfg, vary), cfg["strategy"], Path(c["dir"]).name, int(cfg["seed"]),
                float(cfg["alpha"]), float(cfg.get("comm-s", 0.0)), float(cfg.get("straggler-factor", 1.0)),
                float(cfg.get("outer-lr", np.nan))]
        for i in range(len(c["steps"])):
            rows.append(head + [int(c["steps"][i]), num(c["clock"][i]), num(c["comm"][i]), num(c["acc"][i]),
                                num(c["loss"][i]), num(c["w_corrupt"][i]), num(c["w_clean"][i]),
                                *([] if reg else [num(c["auc"][i])])])
    return write_table(out / name, list(RECORD_COLUMNS + wnames), rows)


# -- the figures -------------------------------------------------------------------------------
COLORS = {"afbo": "tab:blue", "fednest": "tab:orange", "afbo-global": "tab:green", "adbo": "tab:red"}
LABEL = {"afbo": "AFBO", "fednest": "FedNest", "afbo-global": "afbo-global (ours)", "adbo": "ADBO"}
# the paired readings besides AFBO - FedNest: (A, B) gives A - B, the controls' gap and the bilevel part
PAIRS = (("afbo-global", "afbo"), ("afbo-global", "fednest"), ("afbo", "adbo"), ("fednest", "adbo"))


def paired(a: dict, b: dict, key: str, at: float, what: str = "acc") -> tuple[float, float, int]:
    """Mean and 95% interval of a - b at x = ``at`` over the seeds both have (same seed: same split)."""
    common = sorted(set(a) & set(b))
    return interval(
        [
            float(hold(a[sd][key], a[sd][what], np.array([at]))[0] - hold(b[sd][key], b[sd][what], np.array([at]))[0])
            for sd in common
        ]
    )


def bilevel_part(A: dict, F: dict, A0: dict, F0: dict, at: float, what: str) -> tuple[float, float, int]:
    """(AFBO - FedNest) - (AFBO control - FedNest control) at clock ``at``, per seed, mean and 95% interval: the
    part of the methods' gap that their outer-lr = 0 controls (same engines, lower level alone) do not have."""
    common = sorted(set(A) & set(F) & set(A0) & set(F0))
    at_ = np.array([at])
    return interval([float(hold(A[sd]["clock"], A[sd][what], at_)[0] - hold(F[sd]["clock"], F[sd][what], at_)[0]
                     - hold(A0[sd]["clock"], A0[sd][what], at_)[0] + hold(F0[sd]["clock"], F0[sd][what], at_)[0])
               for sd in common])


SETTING_ORDER = ["iid_nostragglers", "noniid-alpha0.5_nostragglers", "iid_stragglers", "noniid-alpha0.5_stragglers"]
# the run-config keys a method's row of summary.json carries
CONFIG_KEYS = (*STEP_KEYS, "outer-lr", "num-rounds", "engine", "local-steps", "inner-rounds", "speed-profile",
               "slow-clients", "speed-param", "sim-step-s", "latency-s")
# the reference classifiers drawn (summary.json's "references"): (kind, line style, label), per task
REFERENCE_LINES = {
    True: (("central", "--", "centralised, all client data (SGD ref.)"),),
    False: (("clean", "--", "clean-label ceiling (SGD ref.)"), ("noisy", "-.", "noisy labels, no cleaning (SGD ref.)"),
            ("val_only", ":", "clean validation parts only (SGD ref.)")),
}


def group_settings(cells: list[dict], vary: dict[str, set[str]]) -> dict[str, dict[str, list[dict]]]:
    """setting -> method -> its cells, the settings in the order of the figures and tables."""
    settings: dict[str, dict[str, list[dict]]] = {}
    for c in cells:
        settings.setdefault(setting_of(c["cfg"]), {}).setdefault(method_of(c["cfg"], vary), []).append(c)

    def rank(s: str) -> tuple:
        base = s.split("_", 1)[1] if s.startswith("reg-") else s
        return (s.startswith("reg-"), SETTING_ORDER.index(base) if base in SETTING_ORDER else 99, s)

    return {s: settings[s] for s in sorted(settings, key=rank)}


def budgets(methods: dict[str, list[dict]]) -> tuple[float, float, dict[str, list[dict]], list[dict]]:
    """(T, the communication budget, the methods without the runs that failed before T, those runs).

    A run that failed (diverged: replies not finite or beyond reply-max-abs) before the others' budget does not
    set T: it is left out of every number and named under the table; one that failed after T counts."""
    T = min(float(c["clock"][-1]) for cs in methods.values() for c in cs if not failed(c))
    early = [c for cs in methods.values() for c in cs if failed(c) and float(c["clock"][-1]) < T]
    methods = {n: [c for c in cs if not any(c is e for e in early)] for n, cs in methods.items()}
    methods = {n: cs for n, cs in methods.items() if cs}
    Cm = min(float(c["comm"][-1]) for cs in methods.values() for c in cs)
    return T, Cm, methods, early


def method_row(cs: list[dict], T: float, Cm: float, thresholds: list[float], reg: bool) -> dict:
    """One method's numbers at the budgets (cs: its cells, by seed), as summary.json holds them."""
    at_T, at_C = np.array([T]), np.array([Cm])
    tgrid = np.linspace(0, T, GRID_POINTS)

    def by_T(c: dict, what: str) -> float:
        return float(hold(c["clock"], c[what], at_T)[0])

    atT = [by_T(c, "acc") for c in cs]
    lossT = [by_T(c, "loss") for c in cs]
    reach = {thr: [first_reach(c, thr, T) for c in cs] for thr in thresholds}
    auc_reach = [first_reach(c, AUC_TARGET, T, "auc") for c in cs]
    return {
        "seeds": [c["cfg"]["seed"] for c in cs],
        "acc0": float(cs[0]["acc"][0]),
        "acc_at_T": interval(atT),
        "loss_at_T": interval(lossT),
        "acc_last20pct": interval([float(np.mean(hold(c["clock"], c["acc"], tgrid[tgrid >= 0.8 * T]))) for c in cs]),
        "acc_at_comm_budget": interval([float(hold(c["comm"], c["acc"], at_C)[0]) for c in cs]),
        "w_corrupted_at_T": interval([by_T(c, "w_corrupt") for c in cs]),
        "w_clean_at_T": interval([by_T(c, "w_clean") for c in cs]),
        "comm_at_T": interval([by_T(c, "comm") for c in cs]),
        "server_steps_at_T": interval([float(hold(c["clock"], c["steps"].astype(float), at_T)[0]) for c in cs]),
        "reach": {
            str(t): {"reached": int(np.sum(~np.isnan(v))), "n": len(v),
                     "time": interval([x for x in v if not np.isnan(x)])}
            for t, v in reach.items()
        },
        "auc_at_T": interval([by_T(c, "auc") for c in cs]) if not reg else (np.nan, np.nan, 0),
        "reach_auc": {"target": AUC_TARGET, "reached": int(np.sum(~np.isnan(auc_reach))), "n": len(cs),
                      "time": interval([x for x in auc_reach if not np.isnan(x)])},
        "per_seed_acc_at_T": atT,
        "per_seed_loss_at_T": lossT,
        "config": {k: cs[0]["cfg"].get(k) for k in CONFIG_KEYS},
    }


def reference_values(ref: dict[str, dict], keys: list[str], reg: bool) -> dict[str, float]:
    """The reference classifiers of a setting, each the mean over its seeds' splits (keys)."""
    rr = {kind: float(np.mean([ref[k][kind] for k in keys])) for kind, _, _ in REFERENCE_LINES[reg]}
    if reg:
        rr["central_loss"] = float(np.mean([ref[k]["central_loss"] for k in keys]))
    return rr


def plot_setting(path: Path, title: str, methods: dict[str, list[dict]], panels: list[tuple], reg: bool,
                 rr: dict[str, float], acc0: float) -> None:
    """The setting's figure: each method's mean and 95% band per panel, the start and the references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.3))
    for name, cs in methods.items():
        cs = sorted(cs, key=lambda c: c["cfg"]["seed"])
        col = COLORS.get(cs[0]["cfg"]["strategy"])
        ls = "--" if is_control(cs[0]["cfg"]) else "-"
        for ax, (key, grid, what) in zip(axes, panels):
            mat = np.array([hold(c[key], c[what], grid) for c in cs])
            mean, half = band(mat)
            scale = 100 if what == "acc" else 1
            ax.plot(grid, scale * mean, color=col, ls=ls, label=f"{name} (n={len(cs)} seeds)")
            if what == "auc":  # and every seed's own curve, thin
                for row in mat:
                    ax.plot(grid, row, color=col, ls=ls, lw=0.5, alpha=0.5)
            ax.fill_between(grid, scale * (mean - half), scale * (mean + half), color=col,
                            alpha=0.12 if ls == "--" else 0.25, lw=0)
    acc_axes = [ax for ax, (_, _, what) in zip(axes, panels) if what == "acc"]
    for ax in acc_axes:  # controls: the starting point, and the reference classifiers
        ax.axhline(100 * acc0, color="gray", ls=":", lw=1, label=f"start (round 0): {100 * acc0:.1f}%")
    if rr:
        for kind, style, label in REFERENCE_LINES[reg]:
            for ax in acc_axes:
                ax.axhline(100 * rr[kind], color="k", ls=style, lw=0.9, label=f"{label}: {100 * rr[kind]:.1f}%")
        if reg:
            axes[2].axhline(rr["central_loss"], color="k", ls="--", lw=0.9,
                            label=f"centralised (SGD ref.): {rr['central_loss']:.3f}")
    _axes_ranges(axes, panels, methods, reg, rr)
    below = 100 * acc0 < axes[0].get_ylim()[0]
    fig.suptitle(f"{title}; mean and 95% interval over seeds"
                 + (f" (round-0 accuracy {100 * acc0:.1f}%, below the y-range)" if below else ""), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def _axes_ranges(axes, panels: list[tuple], methods: dict[str, list[dict]], reg: bool, rr: dict[str, float]) -> None:
    """Labels, grid, y-ranges and the legend of a setting's panels."""
    xlabels = {
        "clock": "simulated device time (s)  [clock_s; not machine time]",
        "comm": "communication: replies received by the server / m  (= rounds for FedNest)",
    }
    for ax, (key, _, what) in zip(axes, panels):
        ax.set_xlabel(xlabels[key])
        ax.set_ylabel({"acc": "test accuracy (%)", "loss": "test loss (cross-entropy)",
                       "auc": "ROC AUC of sigma(x_j): clean vs corrupted (thin: each seed)"}[what])
        ax.grid(alpha=0.3)
    cells = [c for cs in methods.values() for c in cs]
    accs = [float(np.min(c["acc"][1:])) if len(c["acc"]) > 1 else 1.0 for c in cells]
    lo = min(100 * min(accs), 100 * rr.get("noisy", 1.0)) - 3
    hi = 100 * max(rr.get("clean", 0), rr.get("central", 0), max(float(np.max(c["acc"])) for c in cells)) + 2
    for ax, (_, _, what) in zip(axes, panels):
        if what == "acc":
            ax.set_ylim(max(lo, 80.0 if reg else 50.0), min(hi, 100.5))
        elif what == "auc":
            ax.axhline(0.5, color="gray", ls=":", lw=1, label="0.5: no separation")
            ax.set_ylim(0.45, 1.0)
        else:
            losses = [float(np.nanmin(c["loss"])) for c in cells]
            ax.set_ylim(0.9 * min(losses + [rr.get("central_loss", np.inf)]), 3 * max(losses))
            ax.set_yscale("log")
    (axes[-1] if reg else axes[0]).legend(fontsize=7, loc="upper right" if reg else "lower right")


def paired_differences(methods: dict[str, list[dict]], T: float, Cm: float) -> dict[str, dict]:
    """The paired differences of a setting (same seed = same split and corruption): AFBO - FedNest, the other
    PAIRS, their outer-lr = 0 controls' gaps and bilevel parts, and each method minus its control."""
    seeds_by_method = {name: {c["cfg"]["seed"]: c for c in sorted(cs, key=lambda c: c["cfg"]["seed"])}
                       for name, cs in methods.items()}
    diff = {}
    main = [n for n in methods if not is_control(methods[n][0]["cfg"])]

    def of(st: str) -> list[str]:
        return [n for n in main if methods[n][0]["cfg"]["strategy"] == st]

    def control_of(st: str) -> list[str]:
        return [n for n in methods if is_control(methods[n][0]["cfg"]) and methods[n][0]["cfg"]["strategy"] == st]

    for one, two in PAIRS:  # afbo-global (ours, item 8) and ADBO (item 4) next to the others
        if len(of(one)) == 1 and len(of(two)) == 1:
            G, B = seeds_by_method[of(one)[0]], seeds_by_method[of(two)[0]]
            q = diff[f"{one}_minus_{two}"] = {"acc_at_T": paired(G, B, "clock", T),
                                              "loss_at_T": paired(G, B, "clock", T, "loss")}
            if len(control_of(one)) == 1 and len(control_of(two)) == 1:
                G0, B0 = seeds_by_method[control_of(one)[0]], seeds_by_method[control_of(two)[0]]
                q["controls_acc_at_T"] = paired(G0, B0, "clock", T)
                q["bilevel_part_acc"] = bilevel_part(G, B, G0, B0, T, "acc")
    a, f = of("afbo"), of("fednest")
    if len(a) == 1 and len(f) == 1:
        A, F = seeds_by_method[a[0]], seeds_by_method[f[0]]
        diff["afbo_minus_fednest"] = {
            "acc_at_T": paired(A, F, "clock", T),
            "acc_at_comm_budget": paired(A, F, "comm", Cm),
            "loss_at_T": paired(A, F, "clock", T, "loss"),
        }
        ctl = {st: control_of(st) for st in ("afbo", "fednest")}
        if len(ctl["afbo"]) == 1 and len(ctl["fednest"]) == 1:  # item 5: how much of the gap is asynchrony
            A0, F0 = seeds_by_method[ctl["afbo"][0]], seeds_by_method[ctl["fednest"][0]]
            diff["controls_afbo_minus_fednest"] = {"acc_at_T": paired(A0, F0, "clock", T),
                                                   "loss_at_T": paired(A0, F0, "clock", T, "loss")}
            diff["bilevel_part"] = {w: bilevel_part(A, F, A0, F0, T, w) for w in ("acc", "loss")}
    for n in main:
        ctrl = control_of(methods[n][0]["cfg"]["strategy"])
        if len(ctrl) == 1:
            M, K = seeds_by_method[n], seeds_by_method[ctrl[0]]
            diff[f"{n} minus control"] = {
                "acc_at_T": paired(M, K, "clock", T),
                "loss_at_T": paired(M, K, "clock", T, "loss"),
            }
    return diff


def setting_summary(s: str, methods: dict[str, list[dict]], thresholds: list[float], ref: dict, vary: dict,
                    out: Path) -> dict:
    """One setting: its figure (out/fig_<setting>.png) and its entry of summary.json."""
    methods = dict(sorted(methods.items(), key=lambda kv: (is_control(kv[1][0]["cfg"]), kv[0])))
    reg = is_reg(next(iter(methods.values()))[0]["cfg"])
    T, Cm, methods, early = budgets(methods)
    tgrid, cgrid = np.linspace(0, T, GRID_POINTS), np.linspace(0, Cm, GRID_POINTS)
    panels = [("clock", tgrid, "acc"), ("comm", cgrid, "acc")] + [("clock", tgrid, "loss" if reg else "auc")]
    srow = {name: method_row(sorted(cs, key=lambda c: c["cfg"]["seed"]), T, Cm, thresholds, reg)
            for name, cs in methods.items()}
    keys = sorted({reference_key(c["cfg"]) for cs in methods.values() for c in cs})  # every seed of the setting
    rr = reference_values(ref, keys, reg) if ref else {}
    title = setting_title(s, next(iter(methods.values()))[0]["cfg"])
    plot_setting(out / f"fig_{s}.png", title, methods, panels, reg, rr, next(iter(srow.values()))["acc0"])
    return {
        "title": title,
        "time_budget_s": T,
        "comm_budget": Cm,
        "methods": srow,
        "references": rr,
        "paired_differences": paired_differences(methods, T, Cm),
        **({"diverged_before_T": [{"method": method_of(c["cfg"], vary), "seed": c["cfg"]["seed"],
                                   "clock_s": float(c["clock"][-1])} for c in early]} if early else {}),
    }


def figures(dirs: list[Path], out: Path, thresholds: list[float], refs: bool, records: bool = False) -> None:
    cells = read_cells(dirs)
    if not cells:
        sys.exit("no finished cells")
    out.mkdir(parents=True, exist_ok=True)
    vary = varying_step_keys(cells)
    ref = reference_table(cells, out) if refs else {}
    settings = group_settings(cells, vary)
    summary: dict[str, dict] = {}
    lines_md = []
    for s, methods in settings.items():
        summary[s] = setting_summary(s, methods, thresholds, ref, vary, out)
        lines_md += table_md(s, summary[s], thresholds, is_reg(next(iter(methods.values()))[0]["cfg"]))
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    (out / "table.md").write_text("\n".join(lines_md) + "\n")
    print(f"wrote {out}/table.md, summary.json, fig_*.png for {list(settings)}")
    if records:
        print(f"wrote {write_records(cells, vary, out)}")


def reach_txt(q: dict) -> str:
    txt = pm(q["time"], 1.0, 2) if q["reached"] else "not reached"
    return txt + (f" ({q['reached']}/{q['n']} seeds)" if 0 < q["reached"] < q["n"] else "")


def failed(c: dict) -> bool:
    """A run that stopped early (its rounds failed: replies not finite or beyond reply-max-abs)."""
    return c["summary"].get("status", "ok") != "ok" or bool(c["summary"].get("failed_rounds", 0))


def table_md(s: str, S: dict, thresholds: list[float], reg: bool = False) -> list[str]:
    T, Cm = S["time_budget_s"], S["comm_budget"]
    extra = "mean / spread of log coefficients at T" if reg else "weight corrupted / clean at T | AUC at T | " \
        f"time to AUC {AUC_TARGET:g} (s)"
    out = [
        f"### {S['title']}",
        "",
        f"Budget: {T:.2f} simulated s (the smallest final clock of all cells of this setting); "
        f"communication budget {Cm:.1f} replies per client. Mean +- 95% interval over seeds "
        f"(t with n-1 degrees of freedom).",
        "",
        "| method | seeds | acc. at T (%) | test loss at T | mean acc. over [0.8T, T] (%) | acc. at comm. budget (%) | "
        + " | ".join(f"time to {100 * t:g}% (s)" for t in thresholds)
        + f" | replies/client by T | server steps by T | {extra} |",
        "|---|---|---|---|---|---|" + "---|" * len(thresholds) + "---|---|---|" + ("" if reg else "---|---|"),
    ]
    for name, r in S["methods"].items():
        reach = [reach_txt(r["reach"][str(t)]) for t in thresholds]
        out.append(
            f"| {name} | {','.join(map(str, r['seeds']))} | {pm(r['acc_at_T'])} | {pm(r['loss_at_T'], 1.0, 4)} | "
            f"{pm(r['acc_last20pct'])} | {pm(r['acc_at_comm_budget'])} | "
            + " | ".join(reach)
            + f" | {pm(r['comm_at_T'], 1.0, 0)} | {pm(r['server_steps_at_T'], 1.0, 0)} | "
            f"{pm(r['w_corrupted_at_T'], 1.0, 3)} / {pm(r['w_clean_at_T'], 1.0, 3)} |"
            + ("" if reg else f" {pm(r['auc_at_T'], 1.0, 3)} | {reach_txt(r['reach_auc'])} |")
        )
    if S.get("diverged_before_T"):
        out += ["", "Diverged before T and left out of every number above (replies not finite or beyond "
                    "reply-max-abs): " + "; ".join(f"{e['method']} seed {e['seed']} at {e['clock_s']:.2f} s"
                                                  for e in S["diverged_before_T"]) + "."]
    return out + paired_md(S["paired_differences"]) + references_md(S, reg) + [""]


def paired_md(d: dict[str, dict]) -> list[str]:
    """The paragraphs under a setting's table: its paired differences (summary.json's paired_differences)."""
    out = []
    if "afbo_minus_fednest" in d:
        q = d["afbo_minus_fednest"]
        out += [
            "",
            "Paired difference AFBO - FedNest (same seed: same split and corruption): accuracy at T "
            f"{pm(q['acc_at_T'], 100, 2)} points; at the communication budget {pm(q['acc_at_comm_budget'], 100, 2)} "
            f"points; test loss at T {pm(q['loss_at_T'], 1.0, 4)}.",
        ]
    if "bilevel_part" in d:
        q, b = d["controls_afbo_minus_fednest"], d["bilevel_part"]
        out += [
            "",
            "The same gap between the outer-lr = 0 controls (asynchrony and the lower level alone): accuracy at T "
            f"{pm(q['acc_at_T'], 100, 2)} points, test loss {pm(q['loss_at_T'], 1.0, 4)}; the bilevel part "
            "(AFBO - FedNest minus the controls' gap, per seed): accuracy "
            f"{pm(b['acc'], 100, 2)} points, test loss {pm(b['loss'], 1.0, 4)}.",
        ]
    for one, two in PAIRS:
        if f"{one}_minus_{two}" in d:
            q = d[f"{one}_minus_{two}"]
            out += ["", f"Paired difference {LABEL[one]} - {LABEL[two]}: accuracy at T {pm(q['acc_at_T'], 100, 2)} "
                        f"points, test loss at T {pm(q['loss_at_T'], 1.0, 4)}"
                    + (f"; their controls' gap {pm(q['controls_acc_at_T'], 100, 2)} points, the bilevel part "
                       f"{pm(q['bilevel_part_acc'], 100, 2)} points." if "bilevel_part_acc" in q else ".")]
    for k, q in d.items():
        if k.endswith("minus control"):
            out += [
                "",
                f"Paired difference {k} (outer-lr = 0, same seeds): accuracy at T "
                f"{pm(q['acc_at_T'], 100, 2)} points, test loss at T {pm(q['loss_at_T'], 1.0, 4)}.",
            ]
    return out


def references_md(S: dict, reg: bool) -> list[str]:
    """The paragraph under a setting's table on its controls: the round-0 accuracy and the references."""
    out = []
    if S["references"]:
        r = S["references"]
        acc0 = 100 * next(iter(S["methods"].values()))["acc0"]
        if reg:
            out += [
                "",
                f"Controls: round-0 accuracy {acc0:.1f}%; centralised ceiling (softmax SGD on all clients' "
                f"data at the starting coefficients, 30 epochs, last-epoch average, mean over the seeds' "
                f"splits): {100 * r['central']:.1f}%, test loss {r['central_loss']:.4f}.",
            ]
        else:
            out += [
                "",
                f"Controls: round-0 accuracy {acc0:.1f}%; "
                f"softmax SGD references (4 epochs at step 0.1, last-epoch average, mean over the seeds' splits): "
                f"noisy labels {100 * r['noisy']:.1f}%, clean validation parts only {100 * r['val_only']:.1f}%, "
                f"clean labels (ceiling) {100 * r['clean']:.1f}%.",
            ]
    return out


# -- the tuning table --------------------------------------------------------------------------
def minus_control(c: dict, cells: list[dict], diverged: list[dict], T: float) -> str:
    """A run minus its outer-lr = 0 control at T (the same strategy, seed and every other step key; what the upper
    level adds), as "acc. points, test loss"; "control" for a control, "-" when the control is missing or diverged."""
    if is_control(c["cfg"]):
        return "control"
    same = [k for k in STEP_KEYS if k != "outer-lr"]
    for d in cells:
        if is_control(d["cfg"]) and all(d["cfg"].get(k) == c["cfg"].get(k) for k in ("strategy", "seed", *same)):
            if any(d is e for e in diverged):
                return "- (control diverged)"
            da = hold(c["clock"], c["acc"], np.array([T]))[0] - hold(d["clock"], d["acc"], np.array([T]))[0]
            dl = hold(c["clock"], c["loss"], np.array([T]))[0] - hold(d["clock"], d["loss"], np.array([T]))[0]
            return f"{100 * da:+.2f}, {dl:+.4f}"
    return "-"


def tuning(dirs: list[Path], out: Path, records: bool = False) -> None:
    cells = read_cells(dirs)
    vary = varying_step_keys(cells)
    # a cell that failed (its rounds failed: not finite, rejected) diverged: it is listed, but does not set the
    # common budget; a finished cell whose clock is shorter (fewer device seconds per step) does
    diverged = [c for c in cells if failed(c)]
    T = min(float(c["clock"][-1]) for c in cells if not any(c is d for d in diverged))
    rows = []
    c0 = cells[0]["cfg"]
    auc = not is_reg(c0)  # hyper-cleaning: also the weights' AUC
    for c in sorted(cells, key=lambda c: (c["cfg"]["strategy"], method_of(c["cfg"], vary), c["cfg"]["seed"])):
        head = f"| {method_of(c['cfg'], vary)} | {c['cfg']['seed']} |"
        if any(c is d for d in diverged):
            rows.append(f"{head} diverged: its rounds failed from clock {c['clock'][-1]:.2f} s (replies not finite or "
                        "beyond reply-max-abs) | | | | | "
                        + ("| " if auc else "") + f"| {c['clock'][-1]:.2f} |")
            continue
        grid = np.linspace(0, T, GRID_POINTS)
        accs = hold(c["clock"], c["acc"], grid)
        rows.append(
            f"{head} {100 * accs[-1]:.2f} | {100 * accs[grid >= 0.5 * T].mean():.2f} | "
            f"{100 * c['acc'].max():.2f} | {float(hold(c['clock'], c['loss'], np.array([T]))[0]):.4f} | "
            f"{float(hold(c['clock'], c['w_corrupt'], np.array([T]))[0]):.3f} / "
            f"{float(hold(c['clock'], c['w_clean'], np.array([T]))[0]):.3f} | "
            + (f"{float(hold(c['clock'], c['auc'], np.array([T]))[0]):.3f} | " if auc else "")
            + f"{minus_control(c, cells, diverged, T)} | {c['clock'][-1]:.2f} |"
        )
    extra = "mean / spread of log coefficients" if is_reg(c0) else "weight corrupted / clean"
    seeds = ", ".join(str(s) for s in sorted({c["cfg"]["seed"] for c in cells}))
    text = [
        f"Step-size pilot: seed(s) {seeds}, IID (alpha={c0['alpha']:g}), no stragglers; every number at the common "
        f"simulated budget T = {T:.2f} s (the smallest final clock of the runs that did not diverge).",
        "",
        "| method, steps | seed | acc. at T (%) | mean acc. over [T/2, T] (%) | best acc. (%) | test loss at T "
        f"| {extra} at T | " + ("AUC at T | " if auc else "") + "minus its control at T: acc. (points), test loss "
        "| final clock (s) |",
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if auc else ""),
        *rows,
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuning.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    if records:
        print(f"wrote {write_records(cells, vary, out, 'tuning_rounds.parquet')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("figures", "tuning"))
    ap.add_argument("runs", nargs="+", type=Path, help="results folders of python -m zofl.compare (with cells/)")
    ap.add_argument("--out", type=Path, default=Path("docs/results/afbo"))
    ap.add_argument("--thresholds", default="0.8,0.85", help="accuracies for the time-to-reach columns")
    ap.add_argument("--no-references", action="store_true", help="skip the SGD reference classifiers")
    ap.add_argument("--records", action="store_true",
                    help="also write every run's per-round records (long format) to OUT/rounds.parquet (figures) "
                         "or OUT/tuning_rounds.parquet (tuning)")
    args = ap.parse_args()
    if args.mode == "tuning":
        tuning(args.runs, args.out, args.records)
    else:
        figures(args.runs, args.out, [float(t) for t in args.thresholds.split(",")], not args.no_references,
                args.records)


if __name__ == "__main__":
    main()
