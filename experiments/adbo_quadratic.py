"""SDBO and ADBO on the closed-form quadratic (QuadraticHypergrad, m = 4, x_0 = 0): ||x - x*|| / ||x*|| for one
change at a time (docs/afbo.md, section "ADBO", the table of the Method's runs).

    python experiments/adbo_quadratic.py sdbo [ROW ...] [--rounds 40000]   # SDBO's rounds by hand (no engine)
    python experiments/adbo_quadratic.py adbo ROW [--rounds 4000]          # ADBO on the in-process async engine
    python experiments/adbo_quadratic.py bias      # the zero of KKT with the code's plane normals, by K
    python experiments/adbo_quadratic.py kelley    # planes at the exact optimum over the planes (no primal-dual)
    python experiments/adbo_quadratic.py frozen    # keep-200 to 20000 rounds, then the primal-dual steps alone
    python experiments/adbo_quadratic.py list
    python experiments/adbo_quadratic.py sdbo --json docs/results/adbo_quadratic/sdbo.json   # every row, kept
    python experiments/adbo_quadratic.py table --json docs/results/adbo_quadratic/sdbo.json  # its table

Steps as in tests/test_adbo.py (lower-lr 0.2, outer-lr 0.1, z-lr 0.2, dual-lr 0.2, K = cut-steps 20, k_pre =
cut-every 10, 20 slots); a cut costs 2K rounds (K forward, K reverse). SDBO prints the error after 5000, 10000,
20000 and 40000 rounds (those <= --rounds), its largest value over the last quarter of the run and the first round
at which it is <= 1e-3. ADBO: S = 3 of 4, tau = 3, speeds U(0.5, 1), as the test; prints the error at the end.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from zofl.core.method import RoundPlan
from zofl.inprocess import run_inprocess
from zofl.methods.adbo import SDBO, client_work
from zofl.results import read_rounds
from zofl.setup import prepare

TOY = "zofl.tasks.hypergrad:QuadraticHypergrad"
STEPS = {"lower-lr": 0.2, "outer-lr": 0.1, "z-lr": 0.2, "dual-lr": 0.2, "cut-steps": 20, "cut-every": 10,
         "batch-size": 1}
KEPT = {"drop-inactive-cuts": False, "max-cuts": 50}
ALL = {"cut-start-gradient": True, "cut-normalize": True, **KEPT}
ROWS = {
    "none": {},
    "keep-cuts": {"drop-inactive-cuts": False},
    "keep-50": KEPT,
    "keep-200": {"drop-inactive-cuts": False, "max-cuts": 200},
    "start-gradient": {"cut-start-gradient": True},
    "normalize": {"cut-normalize": True},
    "dual-reg": {"dual-reg": 0.01},
    "dual-lr": {"dual-lr": 0.05},
    "outer-lr": {"outer-lr": 0.05},
    "cut-every": {"cut-every": 40},
    "cut-steps-40": {"cut-steps": 40},
    "code": {"cut-gradient": "code"},
    "all": ALL,
    "all-but-start": {"cut-normalize": True, **KEPT},
    "all-but-normalize": {"cut-start-gradient": True, **KEPT},
    "all-but-kept": {"cut-start-gradient": True, "cut-normalize": True},
    "all-200": {**ALL, "max-cuts": 200},
    "all-but-start-K40": {"cut-normalize": True, **KEPT, "cut-steps": 40},
}


MARKS = (5000, 10000, 20000, 40000, 80000)


def sdbo(keys: dict, rounds: int) -> dict:
    """SDBO's rounds by hand: the error ||x - x*|| / ||x*|| after each of MARKS (those <= rounds), its largest value
    over the last quarter of the run and the first round at which it is <= 1e-3 (None: never)."""
    cfg, task, spec = prepare({"task": TOY, "strategy": "sdbo", "num-clients": 4, "beta": 1.0, **STEPS, **keys})
    method = SDBO(cfg, task, spec)
    state, x_star = method.init(), task.solution(spec)[0]
    marks, first, tail = {}, None, 0.0
    for r in range(rounds):
        works = method.plan(state, r, list(range(4)), [])
        state, _ = method.update(state, RoundPlan(r, list(range(4)), [], works),
                                 [client_work(cfg, task, spec, w, {}) for w in works])
        err = float(np.linalg.norm(state["x"] - x_star) / np.linalg.norm(x_star))
        if first is None and err <= 1e-3:
            first = r + 1
        if r + 1 in MARKS:
            marks[str(r + 1)] = err if np.isfinite(err) else None
        if r >= rounds * 3 // 4:
            tail = max(tail, err) if np.isfinite(err) else np.inf
    return {"keys": keys, "rounds": rounds, "error_after": marks,
            "last_quarter_max": tail if np.isfinite(tail) else None, "first_below_1e-3": first}


def sdbo_text(res: dict) -> str:
    marks = " ".join(f"{k}: {v:.4f}" if v is not None else f"{k}: diverged" for k, v in res["error_after"].items())
    tail = "diverged" if res["last_quarter_max"] is None else f"{res['last_quarter_max']:.4f}"
    return f"{marks} | max over the last quarter {tail} | first <= 1e-3: {res['first_below_1e-3']}"


def sdbo_table(results: dict) -> str:
    """The markdown table of ``results`` (row name -> sdbo()'s dict), as docs/results/adbo_quadratic/sdbo.md."""
    cols = [m for m in map(str, MARKS) if any(m in r["error_after"] for r in results.values())]
    lines = ["SDBO on the closed-form quadratic (QuadraticHypergrad, m = 4, x_0 = 0; the steps of "
             "experiments/adbo_quadratic.py), ||x - x*|| / ||x*||, one change at a time from the method's defaults, by",
             "`python experiments/adbo_quadratic.py sdbo --json docs/results/adbo_quadratic/sdbo.json` (the table: "
             "`... table`). A blank cell: the row was not run that long; \"last quarter\": the largest error over the "
             "last quarter of the row's rounds.", "",
             "| " + " | ".join(["row", "change", *(f"{c} rounds" for c in cols), "last quarter",
                                "first <= 1e-3"]) + " |",
             "|---|---|" + "---|" * (len(cols) + 2)]
    for name, r in results.items():
        keys = ", ".join(f"{k} = {v}" for k, v in r["keys"].items()) or "none"
        cells = [("diverged" if r["error_after"][c] is None else f"{r['error_after'][c]:.4f}")
                 if c in r["error_after"] else "" for c in cols]
        tail = "diverged" if r["last_quarter_max"] is None else f"{r['last_quarter_max']:.4f}"
        lines.append("| " + " | ".join([f"`{name}`", keys, *cells, tail, str(r["first_below_1e-3"])]) + " |")
    return "\n".join(lines) + "\n"


def adbo(keys: dict, rounds: int, out: str | None = None, name: str = "adbo") -> str:
    """``out``: keep the run in out/<name> with a checkpoint every 1000 versions, and continue it from its last
    checkpoint if there is one (resume is exact: tests/test_adbo.py), so a long run can be cut into pieces."""
    cfg, task, spec = prepare({"task": TOY, "strategy": "sdbo", "num-clients": 4, "beta": 1.0})
    x_star = task.solution(spec)[0]
    run = {"task": TOY, "strategy": "adbo", "engine": "async", "num-clients": 4, "buffer-size": 3, "delay-bound": 3,
           **STEPS, **keys, "num-rounds": rounds, "speed-profile": "uniform", "speed-param": 0.5, "run-name": name}
    with tempfile.TemporaryDirectory() as tmp:
        if out:
            from pathlib import Path
            resume = any((Path(out) / name).glob("*checkpoint*"))
            d, x = run_inprocess({**run, "checkpoint-every": 1000, "output-dir": out, "resume": resume}, workers=0)
        else:
            d, x = run_inprocess({**run, "checkpoint-every": 0, "output-dir": tmp}, workers=0)
        # the task's test_loss is ||x - x*||, recorded at every version
        err = {r["round"]: r["test_loss"] / np.linalg.norm(x_star) for r in read_rounds(d)
               if r.get("test_loss") is not None}
    first = min((k for k, v in err.items() if v <= 1e-3), default=None)
    windows = " ".join(f"{a}-{a + rounds // 10}: {max(v for k, v in err.items() if a < k <= a + rounds // 10):.4f}"
                       for a in range(rounds // 2, rounds, rounds // 10))
    return f"{rounds} versions: {np.linalg.norm(x - x_star) / np.linalg.norm(x_star):.4f} | largest in {windows}" \
        f" | first <= 1e-3: {first}"


def _problem():
    cfg, task, spec = prepare({"task": TOY, "strategy": "sdbo", "num-clients": 4, "beta": 1.0})
    A, Bs, cs, es = task._data(spec)
    return task, A, Bs, cs, es, task.solution(spec)[0]


def k_rounds(v, u, K, A, Bs, es):
    """The K coupled lower rounds from u = (y_1..y_m, z), phi_j from 0 (STEPS, mu = 1): u^K."""
    from zofl.algorithms.adbo import lower_master_step, lower_worker_step
    m, q = len(Bs), len(A)
    y, z, phi = u[:m * q].reshape(m, q), u[m * q:], np.zeros((m, q))
    for _ in range(K):
        y = np.array([lower_worker_step(A @ y[j] - Bs[j] @ v - es[j], y[j], phi[j], z, 1.0, 0.2) for j in range(m)])
        z, phi = lower_master_step(z, y, phi, 1.0, 0.2, 0.2)
    return np.concatenate([y.ravel(), z])


def affine(K, A, Bs, es):
    """u^K = T u + H v + h (the rounds are affine on the quadratic)."""
    N, p = (len(Bs) + 1) * len(A), Bs.shape[2]
    h = k_rounds(np.zeros(p), np.zeros(N), K, A, Bs, es)
    T = np.stack([k_rounds(np.zeros(p), e, K, A, Bs, es) - h for e in np.eye(N)], axis=1)
    H = np.stack([k_rounds(d, np.zeros(N), K, A, Bs, es) - h for d in np.eye(p)], axis=1)
    return T, H, h


def bias() -> None:
    """KKT on the set phi = 0 with plane normals (-2 H^T r, 2 D r): grad_v f + H^T grad_u f = 0 for the code's
    b_j, c (D = I), the hyper-gradient's zero x* for phi's gradient (D = (I - T)^T)."""
    task, A, Bs, cs, es, x_star = _problem()
    m, q = cs.shape
    for K in (5, 10, 20, 30, 40):
        T, H, h = affine(K, A, Bs, es)
        P, u0 = np.linalg.solve(np.eye(len(T)) - T, H), np.linalg.solve(np.eye(len(T)) - T, h)
        S, target = np.diag(np.r_[np.ones(m * q), np.zeros(q)]), np.r_[cs.ravel(), np.zeros(q)]
        errs = [np.linalg.norm(np.linalg.solve(m * task.lam * np.eye(q) + D.T @ S @ P, -D.T @ S @ (u0 - target))
                               - x_star) / np.linalg.norm(x_star) for D in (H, P)]
        print(f"K = {K}: ||T|| = {np.linalg.norm(T, 2):.4f}; zero with the code's b_j, c {errs[0]:.5f}, "
              f"with phi's gradient {errs[1]:.1e}")


def _qp(G, kappa, w0, cs, lam):
    """min sum_j 0.5 ||y_j - c_j||^2 + m lam/2 ||v||^2 over w = (v, y_1..y_m, z) s.t. G w + kappa <= 0."""
    from scipy.optimize import minimize
    m, q = cs.shape

    def f(w):
        return 0.5 * np.sum((w[q:q + m * q].reshape(m, q) - cs) ** 2) + m * lam / 2 * w[:q] @ w[:q]

    def g(w):
        return np.r_[m * lam * w[:q], (w[q:q + m * q].reshape(m, q) - cs).ravel(), np.zeros(q)]

    return minimize(f, w0, jac=g, method="SLSQP", options={"ftol": 1e-15, "maxiter": 3000},
                    constraints=[{"type": "ineq", "fun": lambda w: -(G @ w + kappa), "jac": lambda w: -G}]).x


def kelley(n_planes: int = 400, K: int = 20) -> None:
    """Kelley's method on the same planes: each new plane at the exact optimum over the planes so far."""
    task, A, Bs, cs, es, x_star = _problem()
    m, q = cs.shape
    T, H, h = affine(K, A, Bs, es)
    for name, D in (("the code's b_j, c", np.eye(len(T))), ("phi's gradient", (np.eye(len(T)) - T).T)):
        w, rows, kappas = np.zeros(q + (m + 1) * q), [], []
        for i in range(1, n_planes + 1):
            r = w[q:] - (T @ w[q:] + H @ w[:q] + h)
            row = np.r_[-2 * H.T @ r, 2 * D @ r]
            rows.append(row)
            kappas.append(r @ r - row @ w)
            w = _qp(np.array(rows), np.array(kappas), w, cs, task.lam)
            if i in (100, 200, 300, 400):
                print(f"{name}: {i} planes: phi at the last plane {r @ r:.1e}, optimum over the planes "
                      f"{np.linalg.norm(w[:q] - x_star) / np.linalg.norm(x_star):.5f} from x*", flush=True)


def frozen(rounds: int = 20000, steps: int = 50000) -> None:
    """keep-200 for ``rounds``; then no more planes: do the primal-dual steps reach the optimum over the planes?"""
    cfg, task, spec = prepare({"task": TOY, "strategy": "sdbo", "num-clients": 4, "beta": 1.0, **STEPS,
                               **ROWS["keep-200"]})
    method = SDBO(cfg, task, spec)
    state, x_star, r = method.init(), task.solution(spec)[0], 0
    A, Bs, cs, es = task._data(spec)
    n = np.linalg.norm(x_star)
    while r < rounds or method.phase(state) != "outer":
        works = method.plan(state, r, list(range(4)), [])
        state, _ = method.update(state, RoundPlan(r, list(range(4)), [], works),
                                 [client_work(cfg, task, spec, w, {}) for w in works])
        r += 1
    on = state["on"]
    G = np.concatenate([state["a"][on], state["b"][on].reshape(on.sum(), -1), state["c"][on]], axis=1)
    w = np.r_[state["x"], state["ys"].ravel(), state["y"]]
    best = _qp(G, state["kappa"][on], w, cs, task.lam)[:3]
    print(f"round {r}: iterate {np.linalg.norm(state['x'] - x_star) / n:.4f} from x*, largest plane violation "
          f"{np.max(G @ w + state['kappa'][on]):.1e}; optimum over its {int(on.sum())} planes "
          f"{np.linalg.norm(best - x_star) / n:.4f} from x*")
    # no more planes: the method reads its typed Params (hp), made when it was built (a change of cfg would not reach
    # it, and did not before this line was mended: the runs printed so far kept adding planes)
    method.hp = dataclasses.replace(method.hp, cut_every=10 ** 12)
    for t in range(1, steps + 1):
        works = method.plan(state, r, list(range(4)), [])
        state, _ = method.update(state, RoundPlan(r, list(range(4)), [], works),
                                 [client_work(cfg, task, spec, w, {}) for w in works])
        r += 1
        if t in (1000, 10000, steps):
            print(f"+{t} outer steps: iterate {np.linalg.norm(state['x'] - x_star) / n:.4f} from x*, "
                  f"{np.linalg.norm(state['x'] - best) / n:.4f} from the optimum over the planes; "
                  f"{int((state['lam'] > 1e-10).sum())} positive duals", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("sdbo", "adbo", "bias", "kelley", "frozen", "list", "table"))
    ap.add_argument("rows", nargs="*", help=f"rows of {sorted(ROWS)} (sdbo: all if none)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=None, help="adbo: keep the run (out/<row>) and continue it from its checkpoint")
    ap.add_argument("--json", default=None, help="sdbo: add each row's result to this JSON file (rows already in it "
                    "at the same rounds are skipped), and write the table beside it (<name>.md); table: read it")
    ap.add_argument("--force", action="store_true", help="sdbo --json: run every row again")
    args = ap.parse_args()
    if args.what in ("bias", "kelley", "frozen"):
        {"bias": bias, "kelley": kelley, "frozen": frozen}[args.what]()
        return
    if args.what == "list":
        for name, keys in ROWS.items():
            print(f"{name}: {keys}")
        return
    path = Path(args.json) if args.json else None
    results = json.loads(path.read_text()) if path and path.exists() else {}
    if args.what == "table":
        print(sdbo_table(results), end="")
        return
    rows = args.rows or (list(ROWS) if args.what == "sdbo" else ["none"])
    for name in rows:
        t0 = time.time()
        if args.what == "sdbo":
            rounds = args.rounds or 40000
            if not args.force and name in results and results[name]["rounds"] == rounds \
                    and results[name]["keys"] == ROWS[name]:
                res = results[name]
            else:
                res = sdbo(ROWS[name], rounds)
                if path:
                    results[name] = res
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(results, indent=1) + "\n")
                    path.with_suffix(".md").write_text(sdbo_table(results))
            text = sdbo_text(res)
        else:
            text = adbo(ROWS[name], args.rounds or 4000, args.out, name)
        print(f"{name} {ROWS[name]}: {text} ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
