"""The straggler and communication model checked against real time, with real compute (issue 50, item 5).

Every straggler claim in docs/afbo.md is read on the simulated clock: a task of K local steps takes K x
sim-step-s x (a straggler's multiplier 1 + (F - 1) Exp(1)) / s_i, plus a download and an upload delay of
Exp(mean F x comm-s) each (zofl.faults.task_delays, F = straggler-factor for the clients of slow-clients, 1 for
the others). Here one straggler setting runs through the Ray simulation (`zofl run`) three ways per seed:

* ``afbo-simulated``: AFBO on the simulated clock (nobody waits; the model's prediction);
* ``afbo-wall``: AFBO on the wall clock with ``real-delays = "compute"``: every client computes its real local
  solve, a straggler computes on for the rest of its drawn multiplier (CPU time on its own thread, so it competes
  for cores as a slower device would), every client sleeps its drawn download and upload delays, and the server
  takes replies in real arrival order;
* ``fednest``: FedNest with ``real-delays = "compute"`` (a synchronous engine's clock is real: each round lasts as
  long as its slowest client really takes; the records keep the simulated clock next to it).

sim-step-s is calibrated, not assumed: the clients' mean compute per charged local step, measured by a short AFBO
run in this process before the seeds (``calibration.json``). The setting is MNIST hyper-cleaning with E7's picks
(docs/results/afbo_cleaning) and the paper's stragglers (half the clients, F = 5) at comm-s = 0.5 s (the "10c"
setting of the studies), on m = 6 clients: Flower's simulation engine runs at most min(32, cores + 4) ClientApps
at once, 6 on a 2-core machine (docs/results/afbo_wallclock), and the model assumes every client its own device.

    python experiments/delay_model_check.py run --out RUNS/delays --data-dir DATA [--seeds 0 1 2]
    python experiments/delay_model_check.py report RUNS/delays --out docs/results/delay_model

``report`` writes what experiments/afbo_wallclock.py's report writes (results.csv, rounds.parquet, table.md with
the real / simulated ratios paired by seed, fig.png), plus pace.md: the steady seconds per server step (AFBO) or
per round (FedNest) on each clock and their ratio, start-up left out, AFBO's time to each target from its first
server step, and on each clock the share of the replies AFBO's steps used that came from the stragglers and their
mean staleness (what the arrival order changes; per run in replies.csv, since the records' ``used`` lists are not in
rounds.parquet); summary.json holds these figures for the pages that quote them.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from afbo_wallclock import read_run, report, toml_value  # modules beside this script
from report_common import iv, pm

from zofl.stats import interval

M = 6
SETTING = {"task": "hyper-cleaning", "dataset": "mnist", "server-fraction": 0.0, "corruption": 0.5, "num-clients": M,
           "alpha": 1000.0, "local-steps": 5, "inner-rounds": 5, "neumann-steps": "5", "lipschitz-g": 20.0,
           "lower-lr": 0.5, "batch-size": 2048, "outer-lr": 1000000.0, "speed-profile": "slow", "speed-param": 1.0,
           "slow-clients": "0,1,2", "straggler-factor": 5.0, "comm-s": 0.5}
ARMS = {"afbo-simulated": {"strategy": "afbo", "engine": "async", "inner-lr": 1.0, "buffer-size": 2,
                           "clock": "simulated"},
        "afbo-wall": {"strategy": "afbo", "engine": "async", "inner-lr": 1.0, "buffer-size": 2, "clock": "wall",
                      "real-delays": "compute"},
        "fednest": {"strategy": "fednest", "beta": 1.0, "real-delays": "compute"}}
TARGETS = (0.85, 0.88)


def calibrate(out: Path, setting: dict, steps: int) -> float:
    """sim-step-s: the clients' compute per charged local step of a short AFBO run (speed 1, no delays), measured in
    this process once per ``out`` and kept in calibration.json (the run itself in calibration/)."""
    path = out / "calibration.json"
    if path.exists():
        return float(json.loads(path.read_text())["sim_step_s"])
    from zofl.inprocess import run_inprocess

    cfg = {**setting, **ARMS["afbo-simulated"], "slow-clients": "", "straggler-factor": 1.0, "comm-s": 0.0,
           "seed": 99, "num-rounds": steps, "output-dir": str(out / "calibration"), "run-name": "afbo"}
    d, _ = run_inprocess(cfg, workers=0)
    s = json.loads((Path(d) / "summary.json").read_text())
    step_s = float(s["total_client_compute_s"]) / float(s["total_local_steps"])
    path.write_text(json.dumps({"sim_step_s": step_s, "compute_s": s["total_client_compute_s"],
                                "local_steps": s["total_local_steps"], "load": os.getloadavg()[0]}) + "\n")
    print(f"calibration: {step_s * 1000:.2f} ms of compute per local step ({s['total_local_steps']} steps)")
    return step_s


def cmd_run(a) -> None:
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    setting = {**SETTING, "dataset": a.dataset, "comm-s": a.comm_s,
               **({"data-dir": str(a.data_dir.resolve())} if a.data_dir else {})}
    step_s = calibrate(out, setting, a.calibration_steps)
    for seed in a.seeds:
        for arm in a.arms:
            name = f"{arm}-s{seed}"
            if (out / name / "summary.json").exists():
                print(f"{name}: finished earlier, kept")
                continue
            rounds = a.steps if ARMS[arm]["strategy"] == "afbo" else a.fednest_rounds
            cfg = {**setting, **ARMS[arm], "sim-step-s": step_s, "seed": seed, "num-rounds": rounds,
                   "output-dir": str(out), "run-name": name}
            cmd = ["zofl", "run", "--quiet", "--ray-cpus", str(M), "--set",
                   *[f"{k}={toml_value(v)}" for k, v in cfg.items()]]
            load, t0 = os.getloadavg()[0], time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            took = time.perf_counter() - t0
            if res.returncode != 0:
                sys.exit(f"{name} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
            (out / name / "machine.json").write_text(json.dumps(
                {"command_s": took, "load_before": load, "load_after": os.getloadavg()[0], "cpus": os.cpu_count(),
                 "ray_cpus": M, "sim_step_s": step_s}) + "\n")
            print(f"{name}: {took:.0f} s (load {load:.1f})", flush=True)


def finished(runs_dir: Path) -> dict[str, dict[int, tuple[dict, Path]]]:
    """Every finished run of ``runs_dir``, read once: arm -> seed -> (its records as ``read_run`` gives them, its
    folder)."""
    out: dict[str, dict[int, tuple[dict, Path]]] = {}
    for d in sorted(runs_dir.iterdir()):
        arm, _, seed = d.name.rpartition("-s")
        if arm and seed.isdigit() and (d / "summary.json").exists():
            out.setdefault(arm, {})[int(seed)] = (read_run(d), d)
    return out


def pace_md(R: dict, S: dict) -> list[str]:
    """Steady pace: AFBO's seconds per server step from its first step on (start-up left out), on each clock, and
    their ratio paired by seed; FedNest's real and simulated seconds per round from round 2 on (the same runs)."""
    def per_step(r: dict, real: bool = False) -> float:
        t = r["real"] if real else r["clock"]
        return float((t[-1] - t[1]) / (len(t) - 2))

    sim, wall, fed = (R.get(arm, {}) for arm in ("afbo-simulated", "afbo-wall", "fednest"))
    pairs = [(per_step(wall[sd][0]), per_step(sim[sd][0])) for sd in sorted(set(sim) & set(wall))]
    fpairs = [(per_step(r, real=True), per_step(r)) for r, _ in fed.values()]
    lines = ["| steady pace (start-up left out) | real s | simulated s | real / simulated, paired |",
             "|---|---|---|---|"]
    for key, label, pr in (("afbo", "AFBO, per server step (separate runs)", pairs),
                           ("fednest", "FedNest, per round (the same runs)", fpairs)):
        if pr:
            real, simulated, ratio = (interval([f(p) for p in pr]) for f in (lambda p: p[0], lambda p: p[1],
                                                                             lambda p: p[0] / p[1]))
            lines.append(f"| {label} | {pm(real, 1.0, 3)} | {pm(simulated, 1.0, 3)} | {pm(ratio, 1.0, 2)} |")
            S.setdefault("pace", {})[key] = {w: iv([f(p) for p in pr]) for w, f in (
                ("real_s", lambda p: p[0]), ("simulated_s", lambda p: p[1]), ("ratio", lambda p: p[0] / p[1]))}
    return lines


def targets_md(R: dict, S: dict) -> list[str]:
    """AFBO's time to each target counted from its first server step (start-up left out) on each clock, and the
    ratio real / simulated paired by seed over the seeds that reach it on both."""
    def since_first(r: dict, target: float) -> float:
        ok = np.nonzero(r["acc"][1:] >= target)[0]
        return float(r["clock"][1:][ok[0]] - r["clock"][1]) if len(ok) else float("nan")

    sim, wall = R.get("afbo-simulated", {}), R.get("afbo-wall", {})
    seeds = sorted(set(sim) & set(wall))
    lines = ["| AFBO, from its first server step | time on the simulated clock (s) | real time (s) | real / simulated, "
             "paired |", "|---|---|---|---|"]
    for t in TARGETS:
        pairs = [(since_first(wall[sd][0], t), since_first(sim[sd][0], t)) for sd in seeds]
        both = [p for p in pairs if np.isfinite(p[0]) and np.isfinite(p[1])]
        lines.append(f"| to {100 * t:g}% test accuracy ({len(both)}/{len(pairs)} seeds reach it on both clocks) | "
                     f"{pm(interval([p[1] for p in both]), 1.0, 2)} | {pm(interval([p[0] for p in both]), 1.0, 2)} | "
                     f"{pm(interval([p[0] / p[1] for p in both if p[1] > 0]), 1.0, 2)} |")
        S.setdefault("to_target", {})[f"{t:g}"] = {
            "simulated_s": iv([p[1] for p in both]), "real_s": iv([p[0] for p in both]),
            "ratio": iv([p[0] / p[1] for p in both if p[1] > 0]), "reached": len(both), "seeds": len(pairs)}
    return lines


def replies(r: dict, d: Path) -> tuple[float, float]:
    """(share of the used replies from slow-clients, their mean staleness) of an AFBO run's records."""
    slow = {int(c) for c in str(r["cfg"].get("slow-clients", "")).split(",") if c.strip()}
    used = [u for line in (d / "rounds.jsonl").read_text().splitlines() if line.strip()
            for u in json.loads(line).get("used", [])]
    if not used:
        return float("nan"), float("nan")
    return float(np.mean([u["client"] in slow for u in used])), float(np.mean([u["delay"] for u in used]))


def reply_rows(R: dict) -> list[dict]:
    """Per AFBO run: the share of the replies its steps used that came from the stragglers and their mean staleness
    (replies.csv: the records' ``used`` lists are not in rounds.parquet)."""
    rows = []
    for arm in ("afbo-simulated", "afbo-wall"):
        for seed, (r, d) in R.get(arm, {}).items():
            share, staleness = replies(r, d)
            rows.append({"arm": arm, "seed": seed, "stragglers_share": share, "staleness": staleness})
    return rows


def replies_md(rows: list[dict], S: dict) -> list[str]:
    lines = ["| AFBO on | seeds | share of used replies from the stragglers | mean staleness of a used reply |",
             "|---|---|---|---|"]
    for arm, label in (("afbo-simulated", "the simulated clock"), ("afbo-wall", "the wall clock (real compute)")):
        mine = [r for r in rows if r["arm"] == arm]
        if mine:
            share, staleness = ([r[k] for r in mine] for k in ("stragglers_share", "staleness"))
            lines.append(f"| {label} | {','.join(str(r['seed']) for r in mine)} | {pm(interval(share), 1.0, 3)} | "
                         f"{pm(interval(staleness), 1.0, 2)} |")
            S.setdefault("replies", {})[arm] = {"stragglers_share": iv(share), "staleness": iv(staleness)}
    return lines


def whole_run(rows: list[dict]) -> dict:
    """Real / simulated time of the whole run (start-up included), paired by seed, from the report's rows."""
    by = {(r["arm"], r["seed"]): r for r in rows}
    afbo = [by[("afbo-wall", sd)]["end_wall_s"] / by[("afbo-simulated", sd)]["end_simulated_s"]
            for arm, sd in by if arm == "afbo-wall" and ("afbo-simulated", sd) in by]
    fed = [r["end_wall_s"] / r["end_simulated_s"] for r in rows if r["arm"] == "fednest"]
    return {"afbo": iv(afbo), "fednest": iv(fed)}


def cmd_report_delays(a) -> None:
    cal = json.loads((a.runs / "calibration.json").read_text())
    rows = report(a.runs, a.out, TARGETS, ylim=(0, 100), wall="wall (real compute, real delays, real arrival order)",
                  device=f"sim-step-s calibrated to {cal['sim_step_s'] * 1000:.2f} ms per local step (the clients' "
                         f"compute in a {cal['local_steps']}-step run)",
                  title=f"MNIST hyper-cleaning, m = {M}, clients 0-2 stragglers (x5), comm-s 0.5 s, real compute; "
                        "mean and 95% interval over seeds")
    S, R = {"sim_step_s": cal["sim_step_s"], "whole_run": whole_run(rows)}, finished(a.runs)
    per_reply = reply_rows(R)
    with open(a.out / "replies.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["arm", "seed", "stragglers_share", "staleness"], lineterminator="\n")
        w.writeheader()
        w.writerows(per_reply)
    text = "\n".join(pace_md(R, S) + [""] + targets_md(R, S) + [""] + replies_md(per_reply, S)) + "\n"
    (a.out / "pace.md").write_text(text)
    (a.out / "summary.json").write_text(json.dumps(S, indent=1, sort_keys=True) + "\n")
    print(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data-dir", type=Path, default=None, help="where mnist.npz is (offline)")
    p.add_argument("--dataset", default="mnist", help="mnist (the check) or digits (a smoke run)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=200, help="AFBO server steps")
    p.add_argument("--fednest-rounds", type=int, default=1, help="FedNest outer rounds")
    p.add_argument("--calibration-steps", type=int, default=40, help="AFBO server steps of the calibration run")
    p.add_argument("--comm-s", type=float, default=SETTING["comm-s"], help="mean delay each way (a smoke run: small)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p = sub.add_parser("report")
    p.add_argument("runs", type=Path)
    p.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    {"run": cmd_run, "report": cmd_report_delays}[a.cmd](a)


if __name__ == "__main__":
    main()
