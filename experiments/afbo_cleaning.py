"""Does hyper-cleaning clean? (issue 31, item 1). Writes into docs/results/afbo_cleaning.

Subcommands (each appends rows to docs/results/afbo_cleaning/results.csv):

  central  -- a centralised bilevel reference on the *federated* objective of the task
              (F(x) = (1/m) sum_i f_i(x, y*(x)), y*(x) = argmin (1/m) sum_i g_i), computed in numpy
              on the task's own arrays (zofl.tasks.hypergrad._cleaning_arrays, pooled over the m
              clients with weight 1/(m n_i) per example, exactly g = mean_i g_i): per outer step,
              the lower problem by warm-started L-BFGS (--inner iterations), v = [grad^2_yy g]^-1 grad_y f
              by warm-started conjugate gradients (--cg iterations) or the truncated Neumann series
              of FedNest (--neumann N, l = --lipschitz-g), the full-batch hyper-gradient
              q_j = -(1/(m n_i)) sigma'(x_j) <r_j, u_j V>, and x <- x - outer-lr q (outer-lr in the
              code's units, so 1e5 here is the federated runs' 1e5). outer-lr = 0 is the
              "noisy labels, no cleaning" control with the same lower solver.
  snr      -- at x = 0, y = y*(0): the exact per-example hyper-gradient against FedNest's
              one-outer-round estimate (minibatch grad_y f, N Neumann minibatch HVPs, one
              minibatch jvp per client): coverage, correlation and per-coordinate signal/noise.
  auc      -- test accuracy and ROC AUC of a federated run's final checkpoint (run folders:
              checkpoint.npz, needs checkpoint-every > 0), from x and mem/y.

AUC = P(sigma(x_j) of a clean example > that of a corrupted one) (ties count 1/2), "corrupted" =
the noisy label differs from the true one, recomputed with the task's own _cleaning_arrays (the
task does not expose the mask; evaluate() only gives the two mean weights).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from zofl.setup import prepare
from zofl.tasks.hypergrad import (
    HyperCleaningTask,
    _cleaning_arrays,
    _offsets,
    _probs,
    _residual,
    _sigmoid,
    ce_loss,
    corrupted_mask,
    roc_auc,
)

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "docs" / "results" / "afbo_cleaning"
FIELDS = ["experiment", "kind", "method", "seed", "dataset", "corruption", "lower_l2", "holdout", "outer_lr",
          "outer_steps", "inner", "solver", "batch", "test_acc", "auc", "w_corrupted", "w_clean", "val_loss",
          "run", "note"]


def auc(score_clean_high: np.ndarray, corrupted: np.ndarray) -> float:
    """P(score of a clean example > score of a corrupted one), ties 1/2 (Mann-Whitney): the task's roc_auc."""
    return roc_auc(score_clean_high, ~np.asarray(corrupted, dtype=bool))


def setup(a, seed: int, num_clients: int | None = None):
    rc = {"strategy": "fednest", "task": "hyper-cleaning", "dataset": a.dataset, "data-dir": a.data_dir,
          "server-fraction": 0.0, "num-clients": num_clients or a.num_clients, "alpha": a.alpha, "seed": seed,
          "corruption": a.corruption, "lower-l2": a.lower_l2, "holdout-fraction": a.holdout}
    return prepare(rc)


def pooled(cfg, spec):
    """Pooled arrays of all clients, x order: (u_tr, noisy, corrupted, coef, u_val, val_labels, vcoef, C)."""
    m = spec.num_clients
    parts = [_cleaning_arrays(spec, i, cfg.holdout_fraction, cfg.corruption) for i in range(m)]
    u_tr = np.vstack([p[0] for p in parts])
    noisy = np.concatenate([p[1] for p in parts])
    corrupted = np.concatenate([p[1] != p[2] for p in parts])
    coef = np.concatenate([np.full(len(p[1]), 1.0 / (m * len(p[1]))) for p in parts])
    u_val = np.vstack([p[3] for p in parts])
    val_labels = np.concatenate([p[4] for p in parts])
    vcoef = np.concatenate([np.full(len(p[4]), 1.0 / (m * len(p[4]))) for p in parts])
    assert len(noisy) == _offsets(spec, cfg.holdout_fraction)[-1]
    return u_tr, noisy, corrupted, coef, u_val, val_labels, vcoef, parts[0][5]


def mask(cfg, spec) -> np.ndarray:
    return corrupted_mask(spec, cfg.holdout_fraction, cfg.corruption)


class Central:
    def __init__(self, cfg, spec):
        self.cfg, self.spec = cfg, spec
        (self.u, self.noisy, self.corrupted, self.coef, self.uv, self.lv, self.vcoef, self.C) = pooled(cfg, spec)
        self.d, self.mu = self.u.shape[1], cfg.lower_l2

    def g(self, x, y):
        W = y.reshape(self.d, self.C)
        c = self.coef * _sigmoid(x)
        val = float(c @ ce_loss(W, self.u, self.noisy)) + 0.5 * self.mu * float(y @ y)
        grad = self.u.T @ (c[:, None] * _residual(W, self.u, self.noisy)) + self.mu * W
        return val, grad.reshape(-1)

    def solve(self, x, y, iters):
        r = minimize(lambda yy: self.g(x, yy), y, jac=True, method="L-BFGS-B", options={"maxiter": iters})
        return r.x

    def hvp(self, x, y, v, S=None):
        W, V = y.reshape(self.d, self.C), v.reshape(self.d, self.C)
        S = _probs(W, self.u) if S is None else S
        SZ = S * (self.u @ V)
        c = self.coef * _sigmoid(x)
        return (self.u.T @ (c[:, None] * (SZ - S * SZ.sum(axis=1, keepdims=True))) + self.mu * V).reshape(-1)

    def grad_f(self, y):
        W = y.reshape(self.d, self.C)
        return (self.uv.T @ (self.vcoef[:, None] * _residual(W, self.uv, self.lv))).reshape(-1)

    def val_loss(self, y):
        return float(self.vcoef @ ce_loss(y.reshape(self.d, self.C), self.uv, self.lv))

    def cg(self, x, y, b, v0, iters):
        S = _probs(y.reshape(self.d, self.C), self.u)
        v = v0.copy()
        r = b - self.hvp(x, y, v, S)
        p, rs = r.copy(), float(r @ r)
        for _ in range(iters):
            Ap = self.hvp(x, y, p, S)
            alpha = rs / float(p @ Ap)
            v += alpha * p
            r -= alpha * Ap
            rs_new = float(r @ r)
            p = r + (rs_new / rs) * p
            rs = rs_new
        return v

    def neumann(self, x, y, b, N, lip):
        S = _probs(y.reshape(self.d, self.C), self.u)
        v, h = b.copy(), b.copy()
        for _ in range(N - 1):
            v = v - self.hvp(x, y, v, S) / lip
            h += v
        return h / lip

    def hypergrad(self, x, y, v):
        """q_j = -(1/(m n_i)) sigma'(x_j) <r_j, u_j V> (f does not depend on x)."""
        W, V = y.reshape(self.d, self.C), v.reshape(self.d, self.C)
        s = _sigmoid(x)
        inner = np.sum(_residual(W, self.u, self.noisy) * (self.u @ V), axis=1)
        return -self.coef * s * (1 - s) * inner

    def metrics(self, x, y):
        ev = HyperCleaningTask().evaluate(self.cfg, self.spec, x, y)
        return {"test_acc": ev["test_acc"], "auc": auc(_sigmoid(x), self.corrupted),
                "w_corrupted": ev["weight_corrupted"], "w_clean": ev["weight_clean"], "val_loss": self.val_loss(y)}


def append_rows(rows):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "results.csv"
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})


def cmd_central(a):
    rows, curves = [], []
    for seed in a.seeds:
        cfg, task, spec = setup(a, seed)
        c = Central(cfg, spec)
        y0 = c.solve(np.zeros(len(c.noisy)), np.zeros(c.d * c.C), a.warm)
        for lr in a.outer_lr:
            t0 = time.time()
            x, y, v = np.zeros(len(c.noisy)), y0.copy(), np.zeros_like(y0)
            curve = [{"t": 0, **c.metrics(x, y)}]
            if lr == 0:  # the control: x stays 0 (every weight 1/2), the same lower iterations in one solve
                curve.append({"t": a.steps, **c.metrics(x, c.solve(x, y, a.steps * a.inner))})
            for t in range(1, a.steps + 1 if lr > 0 else 1):
                b = c.grad_f(y)
                v = c.neumann(x, y, b, a.neumann, a.lipschitz_g) if a.neumann else c.cg(x, y, b, v, a.cg)
                x = x - lr * c.hypergrad(x, y, v)
                y = c.solve(x, y, a.inner)
                if t % a.every == 0 or t == a.steps:
                    curve.append({"t": t, **c.metrics(x, y)})
                    print(f"seed {seed} lr {lr:g} t {t}: {curve[-1]} ({time.time() - t0:.0f}s)", flush=True)
            solver = f"neumann{a.neumann}/l={a.lipschitz_g:g}" if a.neumann else f"cg{a.cg}"
            end = curve[-1]
            rows.append({"experiment": a.experiment, "kind": "central", "method": "central-bilevel" if lr else
                         "noisy-labels (outer-lr=0)", "seed": seed, "dataset": a.dataset, "corruption": a.corruption,
                         "lower_l2": a.lower_l2, "holdout": a.holdout, "outer_lr": lr, "outer_steps": a.steps,
                         "inner": f"lbfgs{a.inner}", "solver": solver, "batch": "full",
                         **{k: end[k] for k in ("test_acc", "auc", "w_corrupted", "w_clean", "val_loss")},
                         "note": a.note})
            curves.append({"experiment": a.experiment, "seed": seed, "outer_lr": lr, "curve": curve})
    append_rows(rows)
    path = OUT / "central_curves.json.gz"
    old = json.loads(gzip.open(path, "rt").read()) if path.exists() else []
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(old + curves))


def cmd_snr(a):
    """Exact per-example hyper-gradient at x = 0, y*(0) vs FedNest's one-round estimate."""
    from zofl.algorithms.lower_level import minibatch_indices
    cfg, task, spec = setup(a, a.seeds[0])
    c = Central(cfg, spec)
    x = np.zeros(len(c.noisy))
    y = c.solve(x, np.zeros(c.d * c.C), a.warm)
    b = c.grad_f(y)
    v_exact = c.cg(x, y, b, np.zeros_like(b), a.cg)
    q_exact = c.hypergrad(x, y, v_exact)
    v_neu = c.neumann(x, y, b, a.neumann or 5, a.lipschitz_g)
    q_neu = c.hypergrad(x, y, v_neu)
    out = {"n_examples": len(x), "cg_iters": a.cg,
           "cos(v_neumann, v_exact)": float(v_neu @ v_exact / np.linalg.norm(v_neu) / np.linalg.norm(v_exact)),
           "|q_exact| mean": float(np.abs(q_exact).mean()),
           "corr(q_neumann_full, q_exact)": float(np.corrcoef(q_neu, q_exact)[0, 1]),
           "auc(-q_exact)": auc(-q_exact, c.corrupted), "auc(-q_neumann_full)": auc(-q_neu, c.corrupted)}
    # FedNest's stochastic estimate for a few batch sizes: per client one minibatch for grad f,
    # N-1 for the Hessians, one for the jvp (the federated code's use of batch-size)
    o = [task.client_oracles(cfg, spec, i) for i in range(spec.num_clients)]
    rng = np.random.default_rng(0)
    for B in a.batches:
        qs = []
        for rep in range(a.reps):
            s = int(rng.integers(1 << 30))
            mb = lambda n, k, j: minibatch_indices(s + 1000 * j + k, n, 1, B)[0]  # noqa: E731
            v = np.mean([oi.grad_y_f(x, y, mb(oi.n_upper, 0, i)) for i, oi in enumerate(o)], axis=0)
            h = v.copy()
            for k in range(1, (a.neumann or 5)):
                v = v - np.mean([oi.hvp_yy_g(x, y, v, mb(oi.n_lower, k, i)) for i, oi in enumerate(o)], axis=0) \
                    / a.lipschitz_g
                h += v
            q = -np.mean([oi.jvp_xy_g(x, y, h / a.lipschitz_g, mb(oi.n_lower, 99, i)) for i, oi in enumerate(o)],
                         axis=0)
            qs.append(q)  # the hyper-gradient d - mean_i jvp_i, d = 0 (f does not depend on x)
        qs = np.array(qs)
        touched = (qs != 0).mean()
        mean_q = qs.mean(axis=0)
        signal = float(np.sqrt(np.mean(q_exact ** 2)))  # RMS of the exact per-example hyper-gradient
        noise = float(np.sqrt(np.mean(qs.var(axis=0, ddof=1))))  # RMS over examples of one estimate's std
        out[f"B={B}"] = {"fraction of examples touched per outer step": float(touched),
                         "RMS of the exact q_j (signal)": signal,
                         "RMS std of one estimate of q_j (noise)": noise,
                         "signal/noise per outer step": signal / noise,
                         "sqrt(B/n_i) (the coverage bound)": float(np.sqrt(min(B, o[0].n_lower) / o[0].n_lower)),
                         f"corr(mean of {a.reps} estimates, q_exact)": float(np.corrcoef(mean_q, q_exact)[0, 1]),
                         "corr(one estimate, q_exact)": float(np.corrcoef(qs[0], q_exact)[0, 1]),
                         "auc(-one estimate)": auc(-qs[0], c.corrupted),
                         "corr(one estimate, exact, on the touched)": float(np.corrcoef(qs[0][qs[0] != 0],
                                                                                       q_exact[qs[0] != 0])[0, 1])}
    print(json.dumps(out, indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"snr_{a.experiment}.json").write_text(json.dumps(out, indent=1) + "\n")


def cmd_auc(a):
    from zofl.results import read_rounds  # noqa: F401  (run folders are read as written)
    rows = []
    for d in a.runs:
        d = Path(d)
        cfgj = json.loads((d / "config.json").read_text())
        rc = cfgj.get("run_config", cfgj)
        ck = np.load(d / "checkpoint.npz")
        x, y = ck["x"], ck["mem/y"]
        cfg, task, spec = prepare({k: v for k, v in rc.items()})
        ev = task.evaluate(cfg, spec, x, y)
        m = mask(cfg, spec)
        rows.append({"experiment": a.experiment, "kind": "federated", "method": rc["strategy"], "seed": rc["seed"],
                     "dataset": rc.get("dataset"), "corruption": rc.get("corruption", 0.5),
                     "lower_l2": rc.get("lower-l2", 0.001), "holdout": rc.get("holdout-fraction", 0.3),
                     "outer_lr": rc.get("outer-lr"), "outer_steps": int(ck["round"]),
                     "inner": rc.get("inner-rounds"), "solver": f"neumann{rc.get('neumann-steps')}",
                     "batch": rc.get("batch-size", 32), "test_acc": ev["test_acc"], "auc": auc(_sigmoid(x), m),
                     "w_corrupted": ev["weight_corrupted"], "w_clean": ev["weight_clean"], "run": d.name,
                     "note": a.note})
        if a.resolve:  # is x good and y just not converged? accuracy of y*(x) (L-BFGS from the run's y)
            c = Central(cfg, spec)
            ys = c.solve(x, y, a.resolve)
            rows.append({**rows[-1], "method": rc["strategy"] + f" x + y*(x) by lbfgs{a.resolve}",
                         "test_acc": task.evaluate(cfg, spec, x, ys)["test_acc"], "val_loss": c.val_loss(ys),
                         "kind": "federated-x-resolved"})
        print(rows[-1], flush=True)
    append_rows(rows)


ALL_CENTRAL = [  # the centralised experiments of the README, as run
    ["central", "--experiment", "E1-central", "--steps", "20", "--every", "5", "--cg", "20", "--outer-lr", "0", "1e5",
     "1e6"],
    ["snr", "--experiment", "E2", "--batches", "32", "512", "100000", "--reps", "10", "--cg", "30"],
    ["central", "--experiment", "E4-central-neumann5", "--neumann", "5", "--steps", "10", "--every", "5",
     "--outer-lr", "1e5"],
]


def ci(vals):
    """(mean, half-width of the 95% t interval, n); n = 1: no interval."""
    from scipy.stats import t as student
    v = np.asarray(vals, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan"), len(v)
    return float(v.mean()), float(student.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))), len(v)


def fmt(m, h, n, scale=1.0, digits=1):
    return f"{m * scale:.{digits}f}" + ("" if n < 2 else f" +- {h * scale:.{digits}f}") + f" (n={n})"


def cmd_table(a):
    """table.md from results.csv: per (experiment, method, outer-lr) the final test accuracy and AUC over
    seeds, and per method the paired difference outer-lr > 0 minus its outer-lr = 0 control (same seed)."""
    rows = list(csv.DictReader(open(OUT / "results.csv")))
    groups = {}
    for r in rows:
        groups.setdefault((r["experiment"], r["method"], r["batch"], r["outer_lr"]), []).append(r)
    lines = ["| experiment | method | batch | outer-lr | test acc. (%) | AUC | weight corrupted / clean |",
             "|---|---|---|---|---|---|---|"]
    for (e, m, b, lr), rs in groups.items():
        acc = ci([float(r["test_acc"]) for r in rs])
        au = ci([float(r["auc"]) for r in rs])
        wc, wk = np.mean([float(r["w_corrupted"]) for r in rs]), np.mean([float(r["w_clean"]) for r in rs])
        lines.append(f"| {e} | {m} | {b} | {float(lr):g} | {fmt(*acc, scale=100)} | {fmt(*au, digits=3)} "
                     f"| {wc:.3f} / {wk:.3f} |")
    lines += ["", "Paired: outer-lr > 0 minus the outer-lr = 0 control of the same experiment, method and seed "
              "(test accuracy, percentage points):", "", "| experiment | method | outer-lr | difference |",
              "|---|---|---|---|"]
    for (e, m, b, lr), rs in groups.items():
        if float(lr) == 0 or not rs[0]["kind"].startswith("federated"):
            continue
        ctrl = {r["seed"]: float(r["test_acc"]) for r in groups.get((e, m, b, "0.0"), [])}
        d = [float(r["test_acc"]) - ctrl[r["seed"]] for r in rs if r["seed"] in ctrl]
        if d:
            lines.append(f"| {e} | {m} | {float(lr):g} | {fmt(*ci(d), scale=100, digits=2)} |")
    (OUT / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cmd_all(a):
    """Everything of docs/results/afbo_cleaning again: the centralised runs, then every grid and its AUCs."""
    import subprocess
    for f in ("results.csv", "central_curves.json.gz"):
        (OUT / f).unlink(missing_ok=True)
    for args in ALL_CENTRAL:
        main(args + ["--data-dir", a.data_dir])
    for grid in a.grids:
        out = Path(a.runs) / Path(grid).stem
        subprocess.run([sys.executable, "-m", "zofl.compare", grid, "--out", str(out), "--via", "inprocess",
                        "--parallel", "2", "--set", f'data-dir="{a.data_dir}"'], check=True)
        resolve = ["--resolve", "300"] if Path(grid).stem != "afbo_cleaning_old" else []
        main(["auc", "--experiment", Path(grid).stem, *resolve, *sorted(str(p) for p in (out / "cells").iterdir())])
    main(["table"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("central", "snr"):
        p = sub.add_parser(name)
        p.add_argument("--experiment", required=True)
        p.add_argument("--dataset", default="mnist")
        p.add_argument("--data-dir", default="/tmp/zofl-data")
        p.add_argument("--num-clients", type=int, default=10)
        p.add_argument("--alpha", type=float, default=1000.0)
        p.add_argument("--seeds", type=int, nargs="+", default=[0])
        p.add_argument("--corruption", type=float, default=0.5)
        p.add_argument("--lower-l2", type=float, default=0.001)
        p.add_argument("--holdout", type=float, default=0.3)
        p.add_argument("--outer-lr", type=float, nargs="+", default=[0.0, 1e5])
        p.add_argument("--steps", type=int, default=30)
        p.add_argument("--inner", type=int, default=10, help="L-BFGS iterations per outer step (warm start)")
        p.add_argument("--warm", type=int, default=200, help="L-BFGS iterations of the first solve")
        p.add_argument("--cg", type=int, default=30)
        p.add_argument("--neumann", type=int, default=0, help="N > 0: FedNest's truncated Neumann series")
        p.add_argument("--lipschitz-g", type=float, default=20.0)
        p.add_argument("--every", type=int, default=5)
        p.add_argument("--batches", type=int, nargs="+", default=[32, 256])
        p.add_argument("--reps", type=int, default=20)
        p.add_argument("--note", default="")
    p = sub.add_parser("auc")
    p.add_argument("--experiment", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--resolve", type=int, default=0, help="also: test accuracy of y*(x_final) by this many "
                   "L-BFGS iterations from the run's y")
    p.add_argument("runs", nargs="+")
    sub.add_parser("table")
    p = sub.add_parser("all")
    p.add_argument("--runs", required=True, help="where the grids' run folders go")
    p.add_argument("--data-dir", default="/tmp/zofl-data")
    p.add_argument("--out", default=str(OUT), help="fixed: docs/results/afbo_cleaning")
    p.add_argument("grids", nargs="+")
    a = ap.parse_args(argv)
    {"central": cmd_central, "snr": cmd_snr, "auc": cmd_auc, "all": cmd_all, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
