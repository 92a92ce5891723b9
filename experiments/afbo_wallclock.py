"""One real-time check of the simulated clock (issue 31, item 6).

The asynchronous engine orders replies by a *simulated* device clock (a task takes local steps x
sim-step-s / device speed, plus communication delays): runs are reproducible and cheap, but is the
time it predicts what a real deployment sees? Here the same setting runs on the Ray simulation
(`zofl run`, one SuperNode per client) twice per seed:

* ``afbo-simulated``: clock = "simulated" (the engine computes device time, nobody sleeps);
* ``afbo-wall``: clock = "wall": every client really sleeps its device time (step-time-s per local
  step / its speed, on top of its real compute, zofl.faults.slowdown_s) and the server takes replies in
  real arrival order; the records' clock is real seconds since the engine started;

and FedNest once (the synchronous engine sleeps the same device time for real in every run and
records the simulated clock next to each round's real duration, so one run gives both).
step-time-s = sim-step-s, so the two clocks charge the same device time per step; what the
simulated clock leaves out is everything else: real compute, Ray's and Flower's message passing,
the server's own work, and the machine's load.

    python experiments/afbo_wallclock.py run --out /tmp/afbo-wall [--seeds 0 1 2] [--steps 400]
    python experiments/afbo_wallclock.py report /tmp/afbo-wall --out docs/results/afbo_wallclock

    python experiments/afbo_wallclock.py run --out /tmp/afbo-trace --seeds 0 --steps 30 --fednest-rounds 1 --trace
    python experiments/afbo_wallclock.py trace /tmp/afbo-trace

``--trace`` records, inside Flower's simulation process (a ``sitecustomize`` hook on the runs' PYTHONPATH;
Flower and zofl unchanged), every message's life: pushed by the ServerApp, taken from the LinkState by the
simulation engine, started and finished by one of its worker threads (the ClientApp on a Ray actor), pulled
by the ServerApp. ``trace`` splits it into those parts and sets it against the simulated clock. ``--vce-workers
N`` (an experiment, not the study: another --out) also gives the simulation engine's thread pool N workers
instead of Python's default min(32, cores + 4), the cap on ClientApps in flight whatever --ray-cpus says.

``report`` writes results.csv (one row per run), rounds.parquet (every record: run, round, the
simulated or real clock, cumulative real time, test accuracy and loss), table.md and fig.png (test
accuracy against time; mean and 95% t band over seeds). The pure compute (the clients' summed
compute seconds, from the summaries) is given next to every wall time as the physical floor.
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
from report_common import band, pm  # a module beside this script

from zofl.figures import save as save_figure
from zofl.stats import interval

# The setting: experiments/afbo_regularization_stragglers.toml (digits regularization, IID, clients 0-4 at
# speed 0.2), AFBO with its picked steps, device time per step 0.2 s (20x the studies' 0.01 s, so that
# device time dominates the few milliseconds a digits step computes).
SETTING = {"task": "regularization", "dataset": "digits", "server-fraction": 0.0, "num-clients": 10,
           "alpha": 1000.0, "local-steps": 5, "inner-rounds": 5, "neumann-steps": "5", "lipschitz-g": 20.0,
           "lower-lr": 0.5, "outer-lr": 10000.0, "speed-profile": "slow", "slow-clients": "0,1,2,3,4",
           "speed-param": 0.2}
STEP_S = 0.2
ARMS = {  # name: (extra run-config)
    "afbo-simulated": {"strategy": "afbo", "engine": "async", "inner-lr": 0.5, "buffer-size": 2,
                       "clock": "simulated", "sim-step-s": STEP_S},
    "afbo-wall": {"strategy": "afbo", "engine": "async", "inner-lr": 0.5, "buffer-size": 2, "clock": "wall",
                  "sim-step-s": STEP_S, "step-time-s": STEP_S},
    "fednest": {"strategy": "fednest", "beta": 1.0, "sim-step-s": STEP_S, "step-time-s": STEP_S},
}
TARGETS = (0.8, 0.9)  # test accuracy (digits: 180 test images, steps of 0.56 points)
WALL = "wall (real sleeps, real arrival order)"  # the table's label of the wall-clock arm

# --trace / --vce-workers: a sitecustomize module on the runs' PYTHONPATH. It acts only in Flower's
# simulation process (flwr-simulation: the ServerApp thread, the LinkState and the engine's worker threads)
# and wraps, without changing what they do, the in-memory Grid's push_messages / pull_messages and the Ray
# backend's process_message: one JSON line per event (message id, event, time.time(), details).
HOOK = r'''
import os, sys

if os.path.basename(sys.argv[0] if sys.argv else "") == "flwr-simulation":
    import json, threading, time
    from datetime import datetime

    _path = os.environ.get("AFBO_WALLCLOCK_TRACE")
    _lock = threading.Lock()

    def _log(**rec):
        if _path:
            with _lock, open(_path, "a") as fh:
                fh.write(json.dumps(rec) + "\n")

    from flwr.superlink.grid.inmemory_grid import InMemoryGrid
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

    _workers = int(os.environ.get("AFBO_WALLCLOCK_VCE_WORKERS") or 0)
    if _workers:  # the engine's ThreadPoolExecutor() (one worker thread per ClientApp in flight)
        import functools
        from concurrent.futures import ThreadPoolExecutor
        vce_api.ThreadPoolExecutor = functools.partial(ThreadPoolExecutor, max_workers=_workers)
    _log(id="", event="start", t=time.time(), vce_workers=_workers or min(32, (os.cpu_count() or 1) + 4),
         cpus=os.cpu_count())

    _push, _pull, _proc = InMemoryGrid.push_messages, InMemoryGrid.pull_messages, RayBackend.process_message

    def push_messages(self, messages):
        t = time.time()
        messages = list(messages)
        ids = list(_push(self, messages))
        for mid, msg in zip(ids, messages):
            _log(id=mid, event="push", t=t, type=msg.metadata.message_type)
        return ids

    def pull_messages(self, message_ids):
        t = time.time()
        out = list(_pull(self, message_ids))
        for msg in out:
            _log(id=msg.metadata.reply_to_message_id, event="pull", t=t)
        return out

    def process_message(self, message, context):
        t = time.time()
        out = None
        try:
            out = _proc(self, message, context)
            return out
        finally:
            rec = dict(id=message.metadata.message_id, event="process", t=t, end=time.time(),
                       delivered=datetime.fromisoformat(message.metadata.delivered_at).timestamp(),
                       partition=int(context.node_config.get("partition-id", -1)))
            try:
                metrics = out[0].content.metric_records.get("metrics") if out else None
                if metrics is not None:
                    rec.update({k: float(metrics[k]) for k in ("steps", "speed", "wall_s", "handle_s")
                                if k in metrics})
            except Exception:
                pass
            _log(**rec)

    InMemoryGrid.push_messages, InMemoryGrid.pull_messages = push_messages, pull_messages
    RayBackend.process_message = process_message
'''


def toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def cmd_run(a) -> None:
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    arms = dict(ARMS)
    if a.latency is not None:  # the simulated clock charging a per-task communication time (latency-s)
        arms = {"afbo-simulated-lat": {**ARMS["afbo-simulated"], "latency-s": a.latency}}
    for seed in a.seeds:
        for arm, extra in arms.items():
            name = f"{arm}-s{seed}"
            if (out / name / "summary.json").exists():
                print(f"{name}: finished earlier, kept")
                continue
            rounds = a.steps if extra["strategy"] == "afbo" else a.fednest_rounds
            cfg = {**SETTING, **extra, "seed": seed, "num-rounds": rounds, "output-dir": str(out), "run-name": name}
            sets = [f"{k}={toml_value(v)}" for k, v in cfg.items()]
            cmd = ["zofl", "run", "--quiet", "--ray-cpus", str(a.ray_cpus), "--set", *sets]
            env = None
            if a.trace or a.vce_workers:
                hook = out / "_trace"
                hook.mkdir(exist_ok=True)
                (hook / "sitecustomize.py").write_text(HOOK)
                (hook / f"{name}.jsonl").unlink(missing_ok=True)
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(hook),
                                                                                 os.environ.get("PYTHONPATH")])),
                       "AFBO_WALLCLOCK_TRACE": str(hook / f"{name}.jsonl"),
                       "AFBO_WALLCLOCK_VCE_WORKERS": str(a.vce_workers or "")}
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            took = time.perf_counter() - t0
            if res.returncode != 0:
                sys.exit(f"{name} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
            (out / name / "machine.json").write_text(json.dumps(
                {"command_s": took, "load_before": load, "load_after": os.getloadavg()[0], "cpus": os.cpu_count(),
                 "ray_cpus": a.ray_cpus, "vce_workers": a.vce_workers, "trace": a.trace}) + "\n")
            print(f"{name}: {took:.0f} s (load {load:.1f})", flush=True)


def read_run(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    cfg = cfg.get("run_config", cfg)
    recs = [json.loads(line) for line in (d / "rounds.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((d / "summary.json").read_text())
    machine = json.loads((d / "machine.json").read_text()) if (d / "machine.json").exists() else {}
    clock = np.array([float(r.get("clock_s") or 0.0) for r in recs])
    real = np.cumsum([float(r.get("wall_s") or 0.0) for r in recs])  # each record's real duration, summed
    return {"name": d.name, "arm": d.name.rsplit("-s", 1)[0], "seed": int(cfg["seed"]), "cfg": cfg,
            "round": np.array([int(r["round"]) for r in recs]), "clock": clock, "real": real,
            "acc": np.array([float(r["test_acc"]) for r in recs]),
            "loss": np.array([float(r.get("test_loss", np.nan)) for r in recs]), "summary": summary,
            "machine": machine}


def first(t: np.ndarray, acc: np.ndarray, target: float) -> float:
    ok = np.nonzero(acc >= target)[0]
    return float(t[ok[0]]) if len(ok) else float("nan")


def ci(vals) -> tuple[float, float, int]:
    return interval(x for x in vals if np.isfinite(x))


def timelines(r: dict) -> dict[str, np.ndarray]:
    """The time axes one run offers: the simulated clock (afbo-simulated, fednest) and real time."""
    if r["arm"] == "afbo-wall":
        return {"wall": r["clock"]}  # the engine's clock is real time since it started
    if r["arm"] in ("afbo-simulated", "afbo-simulated-lat"):
        return {"simulated": r["clock"]}
    return {"simulated": r["clock"], "wall": r["real"]}  # fednest: both in one run


def report_row(r: dict, targets: tuple[float, ...] = TARGETS) -> dict:
    """One run's row of results.csv: its end, and the time to each target on each of its clocks."""
    s = r["summary"]
    row = {"run": r["name"], "arm": r["arm"], "seed": r["seed"], "rounds": int(r["round"][-1]),
           "final_acc": float(r["acc"][-1]), "final_loss": float(r["loss"][-1]),
           "client_compute_s": float(s.get("total_client_compute_s", np.nan)),
           "total_wall_s": float(s.get("total_wall_s", np.nan)),
           "command_s": r["machine"].get("command_s", np.nan), "load_before": r["machine"].get("load_before")}
    for axis, t in timelines(r).items():
        row[f"end_{axis}_s"] = float(t[-1])
        for target in targets:
            row[f"to{target:g}_{axis}_s"] = first(t, r["acc"], target)
    return row


def write_report_files(runs: list[dict], rows: list[dict], out: Path) -> None:
    """results.csv (a row per run) and rounds.parquet (every record on both clocks; deterministic bytes)."""
    from zofl.packed import write_table

    fields = sorted({k for row in rows for k in row}, key=lambda k: (k not in ("run", "arm", "seed"), k))
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    write_table(out / "rounds.parquet", ["run", "arm", "seed", "round", "clock_s", "real_s", "test_acc", "test_loss"],
                [[r["name"], r["arm"], int(r["seed"]), int(r["round"][i]), float(r["clock"][i]), float(r["real"][i]),
                  float(r["acc"][i]), float(r["loss"][i])] for r in runs for i in range(len(r["round"]))])


def times_table(by: dict[str, dict[int, dict]], lat: float | None, targets: tuple[float, ...] = TARGETS,
                wall: str = WALL) -> list[str]:
    """Per method and clock: the time to each target, the end of the run and the clients' compute."""
    lines = ["| method | clock | seeds | " + " | ".join(f"time to {100 * t:g}% (s)" for t in targets)
             + " | end of run (s) | clients' compute (s, summed) |",
             "|---|---|---|" + "---|" * len(targets) + "---|---|"]
    spec = [("AFBO", "simulated", "afbo-simulated", "simulated"), ("AFBO", wall, "afbo-wall", "wall"),
            ("FedNest", "simulated", "fednest", "simulated"), ("FedNest", "wall (same run)", "fednest", "wall")]
    if lat is not None:
        spec.insert(1, ("AFBO", f"simulated, latency-s = {lat:g} (calibrated)", "afbo-simulated-lat", "simulated"))
    for method, label, arm, axis in spec:
        rs = list(by.get(arm, {}).values())
        if not rs:
            continue
        lines.append(f"| {method} | {label} | {','.join(str(r['seed']) for r in rs)} | "
                     + " | ".join(pm(ci([r[f'to{t:g}_{axis}_s'] for r in rs]), 1.0, 2)
                                  + (f" ({sum(np.isfinite(r[f'to{t:g}_{axis}_s']) for r in rs)}/{len(rs)} reached)"
                                     if not all(np.isfinite(r[f'to{t:g}_{axis}_s']) for r in rs) else "")
                                  for t in targets)
                     + f" | {pm(ci([r[f'end_{axis}_s'] for r in rs]), 1.0, 2)} | "
                       f"{pm(ci([r['client_compute_s'] for r in rs]), 1.0, 2)} |")
    return lines


def ratio_lines(by: dict[str, dict[int, dict]], lat: float | None, targets: tuple[float, ...] = TARGETS) -> list[str]:
    """Real time over the simulated clock's prediction, paired by seed."""
    ratios = ["", "Real time over the simulated clock's prediction, per seed then mean +- 95% interval:", ""]
    pairs = [("AFBO", ("afbo-simulated", "afbo-wall")), ("FedNest", ("fednest", "fednest"))]
    if lat is not None:
        pairs.insert(1, (f"AFBO against the simulated clock with latency-s = {lat:g}",
                         ("afbo-simulated-lat", "afbo-wall")))
    for method, (sim_arm, wall_arm) in pairs:
        seeds = sorted(set(by.get(sim_arm, {})) & set(by.get(wall_arm, {})))
        for t in targets:
            v = [by[wall_arm][sd][f"to{t:g}_wall_s"] / by[sim_arm][sd][f"to{t:g}_simulated_s"] for sd in seeds]
            ratios.append(f"- {method}, time to {100 * t:g}%: {pm(ci(v), 1.0, 2)} (n = {sum(np.isfinite(v))} seeds "
                          "reaching it on both clocks)")
        v = [by[wall_arm][sd]["end_wall_s"] / by[sim_arm][sd]["end_simulated_s"] for sd in seeds]
        ratios.append(f"- {method}, whole run (same number of server steps or rounds): {pm(ci(v), 1.0, 2)}")
        v = [(by[wall_arm][sd]["end_wall_s"] - by[sim_arm][sd]["end_simulated_s"]) / by[sim_arm][sd]["rounds"]
             for sd in seeds]
        ratios.append(f"- {method}, real seconds beyond the prediction per "
                      f"{'round' if method == 'FedNest' else 'server step'}"
                      f": {pm(ci(v), 1.0, 3)}")
    return ratios


def report_head(runs: list[dict], rows: list[dict], device: str | None = None) -> list[str]:
    """The setting, the machine and its load, and the engine's worker threads where they were set."""
    loads = [r["load_before"] for r in rows if r.get("load_before") is not None]
    setting = {k: v for k, v in runs[0]["cfg"].items() if k not in ("seed", "run-name", "output-dir", "data-dir")}
    what = (f"Setting: {json.dumps(SETTING)}; device time per local step {STEP_S} s (sim-step-s = step-time-s)"
            if device is None else f"Setting (the first run's; the arms' own keys differ): {json.dumps(setting)}; "
                                   f"{device}")
    head = [f"{what}; "
            f"`zofl run` on the Ray simulation, --ray-cpus {runs[0]['machine'].get('ray_cpus', '?')} "
            f"on {os.cpu_count()} cores; 1-minute load before the runs {min(loads):.1f}-{max(loads):.1f}." if loads
            else "", ""]
    workers = sorted({r["machine"].get("vce_workers") for r in runs
                      if r["machine"].get("vce_workers") and r["arm"] in ("afbo-wall", "fednest")})
    if workers:  # an experiment (--vce-workers), not Flower's default
        head.insert(1, f"Flower's simulation engine given {', '.join(map(str, workers))} worker threads "
                       f"(--vce-workers; its default is min(32, cores + 4)) in the runs that sleep for real.")
    return head


def report(runs_dir: Path, out: Path, targets: tuple[float, ...] = TARGETS, device: str | None = None,
           title: str | None = None, ylim: tuple[float, float] = (50, 100), wall: str = WALL) -> list[dict]:
    """results.csv, rounds.parquet, table.md and fig.png of the finished runs in ``runs_dir``; returns the rows of
    results.csv (``device``: the setting's line about device time, default this study's sleeps)."""
    runs = [read_run(d) for d in sorted(runs_dir.iterdir()) if (d / "summary.json").exists()]
    if not runs:
        sys.exit(f"no finished runs in {runs_dir}")
    out.mkdir(parents=True, exist_ok=True)
    rows = [report_row(r, targets) for r in runs]
    write_report_files(runs, rows, out)
    # table: per method, time to each target on each clock, and the ratio real / simulated paired by seed
    by = {}
    for row in rows:
        by.setdefault(row["arm"], {})[row["seed"]] = row
    lat = next((r["cfg"].get("latency-s") for r in runs if r["arm"] == "afbo-simulated-lat"), None)
    text = report_head(runs, rows, device) + times_table(by, lat, targets, wall) + ratio_lines(by, lat, targets)
    (out / "table.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    figure(runs, out, title, ylim)
    return rows


def cmd_report(a) -> None:
    report(a.runs, a.out)


def read_trace(path: Path) -> tuple[dict, list[dict]]:
    """A --trace file: (its start event, one dict per train message with push, delivered, start, end,
    pull, partition and the reply's steps / speed / wall_s)."""
    start, msgs = {}, {}
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "start":
            start = e
        elif e["event"] == "push":
            msgs.setdefault(e["id"], {})["push"], msgs[e["id"]]["type"] = e["t"], e["type"]
        elif e["event"] == "pull":
            msgs.setdefault(e["id"], {})["pull"] = e["t"]
        elif e["event"] == "process":
            msgs.setdefault(e["id"], {}).update({k: v for k, v in e.items() if k not in ("id", "event", "t")},
                                                start=e["t"])
    keep = [m for m in msgs.values() if str(m.get("type", "")).startswith("train")
            and all(k in m for k in ("push", "delivered", "start", "end", "pull", "steps", "speed"))]
    return start, sorted(keep, key=lambda m: m["push"])


def in_flight(msgs: list[dict]) -> tuple[int, dict[int, float]]:
    """The most ClientApps running at once, and the seconds spent with n running, from the trace."""
    events = sorted([(m["start"], 1) for m in msgs] + [(m["end"], -1) for m in msgs])
    n, most, spent = 0, 0, {}
    for (t, d), (t_next, _) in zip(events, events[1:] + [events[-1]]):
        n += d
        most = max(most, n)
        spent[n] = spent.get(n, 0.0) + t_next - t
    return most, spent


TRACE_PARTS = [("pushed -> taken from the LinkState (engine polls every 0.1 s)", lambda m: m["delivered"] - m["push"]),
               ("taken -> a worker thread starts it (queue)", lambda m: m["start"] - m["delivered"]),
               ("worker: Ray + ClientApp, beyond the device time", lambda m: m["end"] - m["start"] - m["device"]),
               ("worker done -> ServerApp pulls the reply", lambda m: m["pull"] - m["end"]),
               ("whole life beyond the device time", lambda m: m["pull"] - m["push"] - m["device"])]


def trace_lives(name: str, r: dict, start: dict, msgs: list[dict]) -> list[str]:
    """A traced run's messages: the parts of a warm task's real life, the queue by client and the worker threads
    the slow clients hold."""
    step_s = float(r["cfg"].get("sim-step-s", STEP_S))
    for m in msgs:
        m["device"] = m["steps"] * step_s / m["speed"]
    first_pull = min(m["pull"] for m in msgs)
    # the first ClientApp an actor runs loads the package and the data (seconds): start-up, kept apart
    cold = [m for m in msgs if m["end"] - m["start"] - m["device"] > 2.0]
    warm = [m for m in msgs if m["push"] >= first_pull and m not in cold]
    most, spent = in_flight(msgs)
    total = sum(spent.values())
    lines = [f"### {name} (engine worker threads: {start.get('vce_workers', '?')}, cores {start.get('cpus', '?')}; "
             f"1-minute load before {r['machine'].get('load_before', float('nan')):.1f})", "",
             f"{len(msgs)} train messages; {len(cold)} were an actor's first (start-up, "
             f"{np.mean([m['end'] - m['start'] - m['device'] for m in cold]) if cold else 0:.1f} s each beyond "
             f"the device time); {len(warm)} pushed after the first reply and warm, summarised below. "
             f"ClientApps running at once: at most {most}; share of the run with n running: "
             + ", ".join(f"{k}: {v / total:.0%}" for k, v in sorted(spent.items()) if v / total >= 0.01) + ".", "",
             "| part of a task's real life (s) | mean | max |", "|---|---|---|"]
    for label, f in TRACE_PARTS:
        v = np.array([f(m) for m in warm])
        lines.append(f"| {label} | {v.mean():.3f} | {v.max():.3f} |")
    lines.append(f"| device time (steps x sim-step-s / speed: the simulated clock's charge) | "
                 f"{np.mean([m['device'] for m in warm]):.3f} | {max(m['device'] for m in warm):.3f} |")
    by_client = {}
    for m in warm:
        by_client.setdefault(m["partition"], []).append(m["start"] - m["delivered"])
    lines.append("\nQueue (taken -> started), mean s by client: "
                 + ", ".join(f"{p}: {np.mean(v):.2f}" for p, v in sorted(by_client.items())) + ".")
    slow = slow_clients(r)
    if slow:  # worker threads held on average (from the first reply on), by the slow clients and the others
        grid = np.linspace(first_pull, max(m["end"] for m in msgs), 5000)
        held = {True: np.zeros_like(grid), False: np.zeros_like(grid)}
        for m in msgs:
            held[m["partition"] in slow] += (grid >= m["start"]) & (grid < m["end"])
        lines.append(f"Worker threads held on average from the first reply on: clients {sorted(slow)} (slow) "
                     f"{held[True].mean():.2f}, the others {held[False].mean():.2f}; the slow clients hold 5 or "
                     f"more {np.mean(held[True] >= 5):.0%} of that time.")
    return lines


def slow_clients(r: dict) -> set[int]:
    return {int(c) for c in str(r["cfg"].get("slow-clients", "")).split(",") if c.strip()}


def trace_pace(runs: Path, name: str, r: dict) -> list[str]:
    """Real seconds per server step (AFBO on the wall clock, against its simulated runs) or per round (FedNest)."""
    if r["arm"] == "afbo-wall":
        sim = runs / name.replace("afbo-wall", "afbo-simulated")
        per = (r["clock"][-1] - r["clock"][1]) / (len(r["clock"]) - 2)
        line = (f"\nServer steps 2..{int(r['round'][-1])}: {per:.3f} real s per step (first step at "
                f"{r['clock'][1]:.1f} s: start-up)")
        if (sim / "summary.json").exists():
            s_ = read_run(sim)
            sper = (s_["clock"][-1] - s_["clock"][1]) / (len(s_["clock"]) - 2)
            line += f"; the simulated clock of {sim.name}: {sper:.3f} s per step (ratio {per / sper:.2f})"
        lat = runs / name.replace("afbo-wall", "afbo-simulated-lat")
        if (lat / "summary.json").exists():
            l_ = read_run(lat)
            lper = (l_["clock"][-1] - l_["clock"][1]) / (len(l_["clock"]) - 2)
            line += (f"; with latency-s = {l_['cfg'].get('latency-s')} ({lat.name}): {lper:.3f} s per step "
                     f"(ratio {per / lper:.2f})")
        used = [u["client"] for rec in (json.loads(x) for x in (runs / name / "rounds.jsonl").read_text()
                                       .splitlines() if x.strip()) for u in rec.get("used", [])]
        slow = slow_clients(r)
        if slow and used:
            line += (f". Replies the server steps used: {len(used)}, "
                     f"{np.mean([c not in slow for c in used]):.0%} from the clients not in slow-clients")
        return [line + "."]
    real = np.diff(np.concatenate([[0.0], r["real"]]))[2:]
    simd = np.diff(np.concatenate([[0.0], r["clock"]]))[2:]
    return [f"\nRounds 2..{int(r['round'][-1])}: {real.mean():.3f} real s per round against "
            f"{simd.mean():.3f} simulated (ratio {real.mean() / simd.mean():.3f})."]


def cmd_trace(a) -> None:
    """Per traced run: where a task's real life goes, against the device time the simulated clock charges."""
    lines = []
    for path in sorted((a.runs / "_trace").glob("*.jsonl")):
        name = path.stem
        if not (a.runs / name / "summary.json").exists():
            continue
        r = read_run(a.runs / name)
        if r["arm"] not in ("afbo-wall", "fednest"):
            continue  # the simulated clock: clients do not sleep, nothing to set against device time
        start, msgs = read_trace(path)
        lines += trace_lives(name, r, start, msgs) + trace_pace(a.runs, name, r) + [""]
    if not lines:
        sys.exit(f"no traced runs in {a.runs} (run with --trace)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


def figure(runs: list[dict], out: Path, title: str | None = None, ylim: tuple[float, float] = (50, 100)) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.3))
    style = {("afbo-simulated", "simulated"): ("tab:blue", "--", "AFBO, simulated clock"),
             ("afbo-simulated-lat", "simulated"): ("tab:green", "--", "AFBO, simulated clock with latency-s"),
             ("afbo-wall", "wall"): ("tab:blue", "-", "AFBO, real time (wall clock)"),
             ("fednest", "simulated"): ("tab:orange", "--", "FedNest, simulated clock"),
             ("fednest", "wall"): ("tab:orange", "-", "FedNest, real time (same runs)")}
    T = max(float(t[-1]) for r in runs for t in timelines(r).values())
    grid = np.linspace(0, T, 300)
    for (arm, axis), (col, ls, label) in style.items():
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        ends = min(float(timelines(r)[axis][-1]) for r in rs)
        g = grid[grid <= ends]
        mat = np.array([100 * r["acc"][np.clip(np.searchsorted(timelines(r)[axis], g, side="right") - 1, 0, None)]
                        for r in rs])
        mean, half = band(mat)
        ax.plot(g, mean, color=col, ls=ls, label=f"{label} (n={len(rs)})")
        ax.fill_between(g, mean - half, mean + half, color=col, alpha=0.15, lw=0)
    ax.set_xlabel("time (s): simulated device time, or real seconds")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "digits regularization, 5 of 10 clients 5x slower; mean and 95% interval over seeds",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, out / "fig.png", dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=120, help="AFBO server steps")
    p.add_argument("--fednest-rounds", type=int, default=2, help="FedNest outer rounds")
    p.add_argument("--latency", type=float, default=None,
                   help="run only AFBO on the simulated clock with this latency-s (e.g. FedNest's measured real "
                        "seconds per round beyond the prediction, from a first report): arm afbo-simulated-lat")
    p.add_argument("--ray-cpus", type=int, default=10,
                   help="zofl run --ray-cpus: 10 Ray actors, one per client (but see --vce-workers)")
    p.add_argument("--trace", action="store_true",
                   help="record every message's life inside Flower's simulation process (out/_trace/; see `trace`)")
    p.add_argument("--vce-workers", type=int, default=None,
                   help="an experiment: give Flower's simulation engine N worker threads (its default, "
                        "min(32, cores + 4), caps the ClientApps in flight); use another --out than the study's")
    p = sub.add_parser("report")
    p.add_argument("runs", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("trace", help="where the traced runs' tasks spend their real time (runs made with --trace)")
    p.add_argument("runs", type=Path)
    p.add_argument("--out", type=Path, default=None, help="also write the summary (markdown) to this file")
    a = ap.parse_args(argv)
    {"run": cmd_run, "report": cmd_report, "trace": cmd_trace}[a.cmd](a)


if __name__ == "__main__":
    main()
