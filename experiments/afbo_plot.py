"""AFBO vs FedNest on MNIST hyper-cleaning (issue 10, item 5): figures and tables from finished cells.

    python experiments/afbo_plot.py figures RUNS_DIR [RUNS_DIR ...] --out docs/results/afbo
    python experiments/afbo_plot.py tuning /tmp/afbo-runs/tuning --out docs/results/afbo

Reads every finished cell (config.json + rounds.jsonl + summary.json) under RUNS_DIR/cells. A
*setting* is (alpha, stragglers or not); a *line* is a method (strategy, with its step sizes if
several are present). Per setting:

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
(numbers at the budget, time to reach thresholds, paired AFBO - FedNest differences), summary.json,
and references.json (plain softmax SGD on the same clients' training parts: noisy labels, clean
labels, and the clean validation parts alone; computed once and cached).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

GRID_POINTS = 300


# -- reading -----------------------------------------------------------------------------------
def read_cells(dirs: list[Path]) -> list[dict]:
    cells = []
    for root in dirs:
        for d in sorted((root / "cells").glob("*")):
            if not (d / "summary.json").exists():
                continue  # unfinished
            cfg = json.loads((d / "config.json").read_text())
            recs = [json.loads(line) for line in (d / "rounds.jsonl").read_text().splitlines() if line.strip()]
            m = cfg["num-clients"]
            clock, comm, acc, steps, wc, wk = [], [], [], [], [], []
            replies = 0
            for r in recs:
                replies += r.get("participants", 0) or 0
                clock.append(float(r.get("clock_s", 0.0)))
                comm.append(replies / m)
                acc.append(float(r["test_acc"]))
                steps.append(int(r["round"]))
                wc.append(float(r.get("weight_corrupted", np.nan)))
                wk.append(float(r.get("weight_clean", np.nan)))
            cells.append(
                {
                    "dir": str(d),
                    "cfg": cfg,
                    "clock": np.array(clock),
                    "comm": np.array(comm),
                    "acc": np.array(acc),
                    "steps": np.array(steps),
                    "w_corrupt": np.array(wc),
                    "w_clean": np.array(wk),
                }
            )
    return cells


def setting_of(cfg: dict) -> str:
    split = "iid" if cfg["alpha"] >= 100 else f"noniid-alpha{cfg['alpha']:g}"
    strag = "stragglers" if cfg.get("speed-profile") == "slow" and cfg.get("slow-clients") else "nostragglers"
    return f"{split}_{strag}"


def setting_title(s: str) -> str:
    split, strag = s.split("_")
    split = "IID (alpha=1000)" if split == "iid" else f"non-IID (Dirichlet alpha={split.split('alpha')[1]})"
    strag = "5 of 10 clients 5x slower" if strag == "stragglers" else "no stragglers"
    return f"MNIST hyper-cleaning, {split}, {strag}"


STEP_KEYS = ("outer-lr", "inner-lr", "lower-lr", "buffer-size", "beta", "lipschitz-g", "neumann-steps", "batch-size")


def method_of(cfg: dict, vary: dict[str, set[str]]) -> str:
    name = {"afbo": "AFBO (async)", "fednest": "FedNest (sync)"}.get(cfg["strategy"], cfg["strategy"])
    keys = [k for k in STEP_KEYS if k in vary.get(cfg["strategy"], set())]
    return name + (
        " " + ", ".join(f"{k}={cfg[k]:g}" if isinstance(cfg[k], float) else f"{k}={cfg[k]}" for k in keys)
        if keys
        else ""
    )


def varying_step_keys(cells: list[dict]) -> dict[str, set[str]]:
    """Per strategy, the step keys that differ between its cells (then they label its lines)."""
    out = {}
    for strat in {c["cfg"]["strategy"] for c in cells}:
        cs = [c["cfg"] for c in cells if c["cfg"]["strategy"] == strat]
        out[strat] = {k for k in STEP_KEYS if len({json.dumps(c.get(k)) for c in cs}) > 1}
    return out


# -- statistics --------------------------------------------------------------------------------
def hold(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """y of the last record with x <= grid value (zero-order hold; ties: the last record)."""
    idx = np.searchsorted(x, grid, side="right") - 1
    return y[np.clip(idx, 0, len(y) - 1)]


def ci(vals) -> tuple[float, float, int]:
    v = np.asarray(vals, dtype=float)
    n = len(v)
    if n < 2:
        return float(v.mean()) if n else np.nan, np.nan, n
    return float(v.mean()), float(stats.t.ppf(0.975, n - 1) * v.std(ddof=1) / np.sqrt(n)), n


def band(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = mat.shape[0]
    mean = mat.mean(axis=0)
    if n < 2:
        return mean, np.zeros_like(mean)
    return mean, stats.t.ppf(0.975, n - 1) * mat.std(axis=0, ddof=1) / np.sqrt(n)


def first_reach(c: dict, thr: float, budget: float) -> float:
    ok = np.nonzero((c["acc"] >= thr) & (c["clock"] <= budget))[0]
    return float(c["clock"][ok[0]]) if len(ok) else np.nan


# -- references (plain softmax SGD in numpy on the same split) -------------------------------------
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
        rng = np.random.default_rng(0)
        W = np.zeros((u.shape[1], C))
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
                W -= lr * (u[idx].T @ p / len(idx) + c.lower_l2 * W)
                if ep == epochs - 1:
                    avg, k = avg + W, k + 1
        return float(np.mean(np.argmax(u_te @ (avg / k), axis=1) == test.y))

    return {
        "noisy": train(u_tr, noisy),
        "clean": train(np.vstack([u_tr, u_val]), np.concatenate([true, y_val])),
        "val_only": train(u_val, y_val),
        "corrupted_share": float(np.mean(noisy != true)),
        "n_train": int(len(noisy)),
        "n_val": int(len(y_val)),
        "n_test": int(len(test.y)),
    }


def reference_table(cells: list[dict], out: Path) -> dict[str, dict]:
    """references() per (alpha, seed), cached in out/references.json."""
    path = out / "references.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    for c in cells:
        cfg = c["cfg"]
        key = f"alpha={cfg['alpha']:g},seed={cfg['seed']}"
        if key not in cache:
            print(f"reference classifiers for {key} ...", flush=True)
            cache[key] = references(cfg)
            path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return cache


# -- the figures -------------------------------------------------------------------------------
COLORS = {"afbo": "tab:blue", "fednest": "tab:orange"}


def figures(dirs: list[Path], out: Path, thresholds: list[float], refs: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = read_cells(dirs)
    if not cells:
        sys.exit("no finished cells")
    out.mkdir(parents=True, exist_ok=True)
    vary = varying_step_keys(cells)
    ref = reference_table(cells, out) if refs else {}
    settings: dict[str, dict[str, list[dict]]] = {}
    for c in cells:
        settings.setdefault(setting_of(c["cfg"]), {}).setdefault(method_of(c["cfg"], vary), []).append(c)
    order = ["iid_nostragglers", "noniid-alpha0.5_nostragglers", "iid_stragglers", "noniid-alpha0.5_stragglers"]
    names = sorted(settings, key=lambda s: (order.index(s) if s in order else 99, s))
    summary: dict[str, dict] = {}
    lines_md = []
    for s in names:
        methods = settings[s]
        T = min(float(c["clock"][-1]) for cs in methods.values() for c in cs)
        Cm = min(float(c["comm"][-1]) for cs in methods.values() for c in cs)
        tgrid, cgrid = np.linspace(0, T, GRID_POINTS), np.linspace(0, Cm, GRID_POINTS)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.3), sharey=True)
        srow = {}
        seeds_by_method = {}
        for name, cs in methods.items():
            cs = sorted(cs, key=lambda c: c["cfg"]["seed"])
            col = COLORS.get(cs[0]["cfg"]["strategy"])
            seeds_by_method[name] = {c["cfg"]["seed"]: c for c in cs}
            for ax, grid, key in ((axes[0], tgrid, "clock"), (axes[1], cgrid, "comm")):
                mat = np.array([hold(c[key], c["acc"], grid) for c in cs])
                mean, half = band(mat)
                ax.plot(grid, 100 * mean, color=col, label=f"{name} (n={len(cs)} seeds)")
                ax.fill_between(grid, 100 * (mean - half), 100 * (mean + half), color=col, alpha=0.25, lw=0)
            atT = [float(hold(c["clock"], c["acc"], np.array([T]))[0]) for c in cs]
            last = [float(np.mean(hold(c["clock"], c["acc"], tgrid[tgrid >= 0.8 * T]))) for c in cs]
            atC = [float(hold(c["comm"], c["acc"], np.array([Cm]))[0]) for c in cs]
            wcor = [float(hold(c["clock"], c["w_corrupt"], np.array([T]))[0]) for c in cs]
            wcln = [float(hold(c["clock"], c["w_clean"], np.array([T]))[0]) for c in cs]
            comm_T = [float(hold(c["clock"], c["comm"], np.array([T]))[0]) for c in cs]
            steps_T = [float(hold(c["clock"], c["steps"].astype(float), np.array([T]))[0]) for c in cs]
            reach = {thr: [first_reach(c, thr, T) for c in cs] for thr in thresholds}
            srow[name] = {
                "seeds": [c["cfg"]["seed"] for c in cs],
                "acc0": float(cs[0]["acc"][0]),
                "acc_at_T": ci(atT),
                "acc_last20pct": ci(last),
                "acc_at_comm_budget": ci(atC),
                "w_corrupted_at_T": ci(wcor),
                "w_clean_at_T": ci(wcln),
                "comm_at_T": ci(comm_T),
                "server_steps_at_T": ci(steps_T),
                "reach": {
                    str(t): {
                        "reached": int(np.sum(~np.isnan(v))),
                        "n": len(v),
                        "time": ci([x for x in v if not np.isnan(x)]),
                    }
                    for t, v in reach.items()
                },
                "per_seed_acc_at_T": atT,
                "config": {
                    k: cs[0]["cfg"].get(k)
                    for k in (
                        *STEP_KEYS,
                        "num-rounds",
                        "engine",
                        "local-steps",
                        "inner-rounds",
                        "speed-profile",
                        "slow-clients",
                        "speed-param",
                        "sim-step-s",
                        "latency-s",
                    )
                },
            }
        # controls: the starting point, and the reference classifiers (mean over the seeds present)
        acc0 = next(iter(srow.values()))["acc0"]
        for ax in axes:
            ax.axhline(100 * acc0, color="gray", ls=":", lw=1, label=f"start (round 0): {100 * acc0:.1f}%")
        any_cell = next(iter(methods.values()))
        keys = sorted({f"alpha={c['cfg']['alpha']:g},seed={c['cfg']['seed']}" for c in any_cell})
        rr = {}
        if ref:
            for kind, style, label in (
                ("clean", "--", "clean-label ceiling"),
                ("noisy", "-.", "noisy labels, no cleaning"),
                ("val_only", ":", "clean validation parts only"),
            ):
                v = np.mean([ref[k][kind] for k in keys])
                rr[kind] = float(v)
                for ax in axes:
                    ax.axhline(100 * v, color="k", ls=style, lw=0.9, label=f"{label} (SGD ref.): {100 * v:.1f}%")
        axes[0].set_xlabel("simulated device time (s)  [clock_s; not machine time]")
        axes[1].set_xlabel("communication: replies received by the server / m  (= rounds for FedNest)")
        axes[0].set_ylabel("test accuracy (%)")
        lo = (
            min(
                100
                * min(float(np.min(c["acc"][1:])) if len(c["acc"]) > 1 else 100 for cs in methods.values() for c in cs),
                100 * rr.get("noisy", 100),
            )
            - 3
        )
        for ax in axes:
            ax.set_ylim(
                max(lo, 50.0),
                100 * max(rr.get("clean", 0), max(float(np.max(c["acc"])) for cs in methods.values() for c in cs)) + 2,
            )
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=7, loc="lower right")
        fig.suptitle(
            f"{setting_title(s)}; mean and 95% interval over seeds (round-0 accuracy {100 * acc0:.1f}%, "
            f"below the y-range)"
            if 100 * acc0 < axes[0].get_ylim()[0]
            else setting_title(s),
            fontsize=9,
        )
        fig.tight_layout()
        fig.savefig(out / f"fig_{s}.png", dpi=110)
        plt.close(fig)
        # paired differences (same seed = same split and corruption)
        diff = {}
        names_m = list(methods)
        a = [n for n in names_m if n.startswith("AFBO")]
        f = [n for n in names_m if n.startswith("FedNest")]
        if len(a) == 1 and len(f) == 1:
            common = sorted(set(seeds_by_method[a[0]]) & set(seeds_by_method[f[0]]))
            for label, key, grid_x in (("acc_at_T", "clock", T), ("acc_at_comm_budget", "comm", Cm)):
                d = [
                    float(
                        hold(seeds_by_method[a[0]][sd][key], seeds_by_method[a[0]][sd]["acc"], np.array([grid_x]))[0]
                        - hold(seeds_by_method[f[0]][sd][key], seeds_by_method[f[0]][sd]["acc"], np.array([grid_x]))[0]
                    )
                    for sd in common
                ]
                diff[label] = ci(d)
        summary[s] = {
            "title": setting_title(s),
            "time_budget_s": T,
            "comm_budget": Cm,
            "methods": srow,
            "references": rr,
            "afbo_minus_fednest": diff,
        }
        lines_md += table_md(s, summary[s], thresholds)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    (out / "table.md").write_text("\n".join(lines_md) + "\n")
    print(f"wrote {out}/table.md, summary.json, fig_*.png for {names}")


def pm(t: tuple, scale: float = 100.0, digits: int = 1) -> str:
    mean, half, n = t
    if n == 0 or np.isnan(mean):
        return "-"
    if np.isnan(half):
        return f"{scale * mean:.{digits}f} (n={n})"
    return f"{scale * mean:.{digits}f} +- {scale * half:.{digits}f}"


def table_md(s: str, S: dict, thresholds: list[float]) -> list[str]:
    T, Cm = S["time_budget_s"], S["comm_budget"]
    out = [
        f"### {S['title']}",
        "",
        f"Budget: {T:.2f} simulated s (the smallest final clock of all cells of this setting); "
        f"communication budget {Cm:.1f} replies per client. Mean +- 95% interval over seeds "
        f"(t with n-1 degrees of freedom).",
        "",
        "| method | seeds | acc. at T (%) | mean acc. over [0.8T, T] (%) | acc. at comm. budget (%) | "
        + " | ".join(f"time to {100 * t:g}% (s)" for t in thresholds)
        + " | replies/client by T | server steps by T | weight corrupted / clean at T |",
        "|---|---|---|---|---|" + "---|" * len(thresholds) + "---|---|---|",
    ]
    for name, r in S["methods"].items():
        reach = []
        for t in thresholds:
            q = r["reach"][str(t)]
            txt = pm(q["time"], 1.0, 2) if q["reached"] else "not reached"
            if 0 < q["reached"] < q["n"]:
                txt += f" ({q['reached']}/{q['n']} seeds)"
            reach.append(txt)
        out.append(
            f"| {name} | {','.join(map(str, r['seeds']))} | {pm(r['acc_at_T'])} | {pm(r['acc_last20pct'])} | "
            f"{pm(r['acc_at_comm_budget'])} | "
            + " | ".join(reach)
            + f" | {pm(r['comm_at_T'], 1.0, 0)} | {pm(r['server_steps_at_T'], 1.0, 0)} | "
            f"{pm(r['w_corrupted_at_T'], 1.0, 3)} / {pm(r['w_clean_at_T'], 1.0, 3)} |"
        )
    d = S["afbo_minus_fednest"]
    if d:
        out += [
            "",
            "Paired difference AFBO - FedNest (same seed: same split and corruption), percentage points: "
            f"at T {pm(d['acc_at_T'], 100, 2)}; at the communication budget {pm(d['acc_at_comm_budget'], 100, 2)}.",
        ]
    if S["references"]:
        r = S["references"]
        out += [
            "",
            f"Controls: round-0 accuracy {100 * next(iter(S['methods'].values()))['acc0']:.1f}%; "
            f"softmax SGD references (4 epochs at step 0.1, last-epoch average, mean over the seeds' splits): noisy labels {100 * r['noisy']:.1f}%, "
            f"clean validation parts only {100 * r['val_only']:.1f}%, clean labels (ceiling) {100 * r['clean']:.1f}%.",
        ]
    return out + [""]


# -- the tuning table --------------------------------------------------------------------------
def tuning(dirs: list[Path], out: Path) -> None:
    cells = read_cells(dirs)
    vary = varying_step_keys(cells)
    T = min(float(c["clock"][-1]) for c in cells)
    rows = []
    for c in sorted(cells, key=lambda c: (c["cfg"]["strategy"], method_of(c["cfg"], vary))):
        grid = np.linspace(0, T, GRID_POINTS)
        accs = hold(c["clock"], c["acc"], grid)
        rows.append(
            f"| {method_of(c['cfg'], vary)} | {100 * accs[-1]:.1f} | {100 * accs[grid >= 0.5 * T].mean():.1f} | "
            f"{100 * c['acc'].max():.1f} | {float(hold(c['clock'], c['w_corrupt'], np.array([T]))[0]):.3f} / "
            f"{float(hold(c['clock'], c['w_clean'], np.array([T]))[0]):.3f} | {c['clock'][-1]:.2f} |"
        )
    text = [
        "Step-size pilot: seed 0, IID (alpha=1000), no stragglers; every number at the common simulated "
        f"budget T = {T:.2f} s (the smallest final clock).",
        "",
        "| method, steps | acc. at T (%) | mean acc. over [T/2, T] (%) | best acc. (%) | weight corrupted / clean at T "
        "| final clock (s) |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuning.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("figures", "tuning"))
    ap.add_argument("runs", nargs="+", type=Path, help="results folders of python -m zofl.compare (with cells/)")
    ap.add_argument("--out", type=Path, default=Path("docs/results/afbo"))
    ap.add_argument("--thresholds", default="0.8,0.85", help="accuracies for the time-to-reach columns")
    ap.add_argument("--no-references", action="store_true", help="skip the SGD reference classifiers")
    args = ap.parse_args()
    if args.mode == "tuning":
        tuning(args.runs, args.out)
    else:
        figures(args.runs, args.out, [float(t) for t in args.thresholds.split(",")], not args.no_references)


if __name__ == "__main__":
    main()
