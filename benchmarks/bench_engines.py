"""Benchmark: the engines side by side (message, legacy, async through Ray; in-process), the cost of
learning which node holds which partition, peak memory at 1,000 clients, a Table I cell against its
physical floor, and the sync engine's per-round overhead against Flower's own FedAvg. Every figure
comes from one invocation, runs interleaved.

    python benchmarks/bench_engines.py --data-dir /tmp/zofl-data --out docs/benchmark-engines.json
    python benchmarks/bench_engines.py --data-dir /tmp/zofl-data --part overhead --out docs/benchmark-overhead.json

Parts (``--part``, repeatable; default all but overhead):
  scaling     for m in --clients and work in {noop, real}: seconds per round of engine sync (Ray),
              legacy (Ray), in-process (InProcessGrid, 2 spawned workers, engine sync), and seconds
              per update of engine async (fedbuff, Ray), run one after the other. Round / update 1
              (Ray and worker start-up, data loading) is dropped; min and median over the next
              --rounds (--rounds-1000 at 1,000 clients). Every run also gives the partition-learning
              time (the ServerApp's log line), the peak RSS of its whole process tree, the server's
              own compute, and the CPU time other processes used meanwhile.
  memory      peak RSS at 1,000 clients: from the scaling runs at 1,000 if there were any, otherwise
              one dedicated run (engine sync, real work).
  diag        what partition learning costs inside Flower: passes of the simulation engine's message
              extractor over Flower's own InMemoryLinkState at 100 and 1,000 nodes.
  table1      ZO-HFL, Fashion-MNIST, m = 10, alpha 1, beta 0.5, R = --table1-rounds (500), tau 20,
              other keys at their defaults: `flwr run` (engine sync, 10 SuperNodes, 2 Ray actors of 1
              CPU), in-process with 2 spawned workers, in-process with workers = 0 (serial).
  overhead    for m in --overhead-clients (10, 100), noop work, beta 1: strategy fedavg (our
              MessageStrategy, engine sync) and flwr-fedavg (Flower's ``flwr.serverapp.strategy.FedAvg``
              driving the same clients), --repeats runs of each in alternating order (A B, B A, ...),
              through `flwr run` (Ray, as scaling) and in-process (2 spawned workers). Seconds per round =
              the median, over --overhead-rounds rounds after round 1, of the time between two
              configure_train calls (the whole round as Flower's Strategy.start runs it, evaluation and
              record included; the records' wall_s cannot serve: Flower's FedAvg plans only when it
              aggregates). Per configuration: the median over repeats with its distribution-free 95%
              interval, the paired ratio ours / Flower's (geometric mean, 95% t interval on the logs),
              the floor (client compute / 2 cores + the server's own steps: plan + complete) and the
              split of a round (wire: building and reading messages; engine: push, Ray, pull).
              What is equal: the clients (the same ClientApp, NumPyClient.fit, client_work, 2 SGD steps),
              the arrays both ways ("x", 62,720 bytes per client each way: the records' downlink and
              uplink bytes, printed per run), x_0, the DeadlineGrid and Strategy.start loop, and
              SyncRun.complete (checks, evaluation, record, checkpoint). What differs: ours samples S_r
              with the run's seed and builds one Work and one ArrayRecord per client, its config
              carrying the data fingerprint the client checks (cached per process); Flower's samples
              with its own random.sample, sends one shared RecordDict (config "server-round" instead of
              the fingerprint) and averages with aggregate_arrayrecords (the replies decoded twice) in
              place of FedAvg.update. Both reach the same model (final accuracy printed in the JSON).

Work: noop = fedavg, local-steps = 1 (K = 2 SGD steps of batch 32, about a millisecond; the
run-config refuses tau = 0 with local-steps = 0; the client still decodes, loads its data once per
process and replies with its model); real = fedavg, tau = 20 (K = 2 ceil(20 sqrt(r+1))
local SGD steps, batch 32). Scaling runs use Fashion-MNIST, alpha = 1000 (near-equal splits),
min-partition-size 1, seed 0; beta = 1 up to 100 clients and --beta-1000 (0.1) at 1,000. The async
engine gets buffer-size = concurrency = clients per synchronous round, so one update aggregates as
many replies as one round.

Instrumentation without touching the App: the script writes a ``sitecustomize.py`` (HOOK) to a
temporary folder on PYTHONPATH of every process it starts. It sends the "zofl" logger's partition
line and warnings to stdout (the App configures no handler, so Flower's stream does not show them)
and, when ``zofl.server_app`` is imported, wraps the server's own steps (make_run, SyncRun init /
plan / complete, the method's update and metrics, the round record, the checkpoint) and the sync
strategies' configure_train / aggregate_train and DeadlineGrid.send_and_receive with timers whose
totals (and, for the overhead part, every call's start and duration) are printed when the run
finishes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PARTITIONS_RE = re.compile(r"learned the partitions of (\d+) SuperNodes in ([0-9.]+)s")
TIMING_PREFIX = "zofl-bench-timing "
WORK = {
    "noop": {"strategy": "fedavg", "tau": 0.0, "local-steps": 1},
    "real": {"strategy": "fedavg", "tau": 20.0},
}
HOOK = '''\
"""bench_engines.py instrumentation (written to a temporary folder on PYTHONPATH; not part of the App)."""
import importlib.abc as _abc
import importlib.util as _util
import json as _json
import logging as _logging
import sys as _sys
import time as _time


class _ZoflToStdout(_logging.Handler):
    """The zofl logger's partition line and warnings to stdout (which Flower streams)."""

    def emit(self, record):
        msg = record.getMessage()
        if record.levelno >= _logging.WARNING or msg.startswith("learned the partitions"):
            try:
                _sys.stdout.write("zofl-log %s %s\\n" % (record.levelname, msg))
                _sys.stdout.flush()
            except Exception:
                pass


_lg = _logging.getLogger("zofl")
_lg.addHandler(_ZoflToStdout())
_lg.setLevel(_logging.INFO)

_TIMES = {}
_SEQ = {}  # key -> [[start, seconds], ...] of every call (the overhead part's per-round figures)


def _wrap(owner, name, key, seq=False, optional=False):
    fn = getattr(owner, name, None)
    if fn is None and not optional:  # the App moved it: fail loudly rather than time nothing
        raise AttributeError(f"bench hook: {owner!r} has no {name!r}; update _instrument")
    if fn is None or getattr(fn, "_bench_wrapped", False):
        return

    def timed(*a, **k):
        t = _time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            d = _time.perf_counter() - t
            _TIMES[key] = _TIMES.get(key, 0.0) + d
            _TIMES["n_" + key] = _TIMES.get("n_" + key, 0) + 1
            if seq:
                _SEQ.setdefault(key, []).append([round(t, 6), round(d, 6)])

    timed._bench_wrapped = True
    setattr(owner, name, timed)


def _instrument():
    import zofl.core.rounds as rounds
    import zofl.core.run as run_mod
    import zofl.server_app as sa
    from zofl.methods import METHODS
    from zofl.results import ResultsWriter

    _wrap(sa, "make_run", "make_run")  # parse, load + split the data, server data, test set
    _wrap(run_mod.Run, "__init__", "run_init")  # x_0 (pretrain), round-0 evaluation and record (both engines)
    _wrap(rounds.SyncRun, "plan", "plan", seq=True)  # S_r, every sampled client's Work
    _wrap(rounds.SyncRun, "complete", "complete", seq=True)  # checks, update, evaluation, record, checkpoint
    _wrap(run_mod, "save_checkpoint", "checkpoint")
    _wrap(ResultsWriter, "write_round", "write_round")
    for entry in METHODS.values():
        _wrap(entry.server, "update", "update")
        _wrap(entry.server, "update_async", "update", optional=True)  # asynchronous methods only
        _wrap(entry.server, "plan_task", "plan", optional=True)
        _wrap(entry.server, "metrics", "metrics")  # evaluation of the new model
    finish = run_mod.Run.finish

    def finish_and_report(self, *a, **k):
        t = _time.perf_counter()
        out = finish(self, *a, **k)
        _TIMES["finish_s"] = _time.perf_counter() - t
        print("zofl-bench-timing " + _json.dumps({**_TIMES, "seq": _SEQ}), flush=True)
        return out

    run_mod.Run.finish = finish_and_report
    # a synchronous round as Flower's Strategy.start runs it, for our strategy and Flower's FedAvg:
    # configure_train (S_r, the messages), send_and_receive (push, the clients, pull), aggregate_train
    from zofl.strategies.deadline import DeadlineGrid
    from zofl.strategies.flwr_fedavg import FlowerFedAvg
    from zofl.strategies.message import MessageStrategy

    for cls in (MessageStrategy, FlowerFedAvg):
        _wrap(cls, "configure_train", "configure_train", seq=True)
        _wrap(cls, "aggregate_train", "aggregate_train", seq=True)
    _wrap(DeadlineGrid, "send_and_receive", "send_and_receive", seq=True)


class _Finder(_abc.MetaPathFinder):
    """Instrument the server once zofl.server_app has been executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "zofl.server_app":
            return None
        _sys.meta_path.remove(self)
        spec = _util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_instrument(module):
            exec_module(module)
            try:
                _instrument()
            except Exception as exc:  # never break the run
                print("zofl-bench-timing-error %r" % (exc,), flush=True)

        spec.loader.exec_module = exec_and_instrument
        return spec


_sys.meta_path.insert(0, _Finder())
'''


# ---------------------------------------------------------------------------------------------
# measuring a run: peak RSS of its process tree, CPU time of everything else on the machine

CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _procs() -> dict[int, tuple[int, int, int, int]]:
    """{pid: (ppid, cpu ticks user+system, rss bytes, start time)} of every process."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            out[int(p)] = (int(st[1]), int(st[11]) + int(st[12]), int(st[21]) * PAGE, int(st[19]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _under(procs: dict, root: int) -> set[int]:
    """``root`` and its descendants."""
    inside = set()
    for pid in procs:
        q, seen = pid, 0
        while q > 1 and q != root and seen < 64:
            q, seen = procs.get(q, (0,))[0], seen + 1
        if q == root:
            inside.add(pid)
    return inside


def _cpu_stat() -> list[int]:
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


class Sampler:
    """Every 0.5 s: RSS summed over ``root`` and its descendants (as bench_scale.py: SuperLink ->
    SuperExec -> simulation process with the ServerApp -> Ray's processes and actors), and the CPU
    time of every process that is not this benchmark's (other work on the machine)."""

    def __init__(self, root: int):
        self.root, self.me = root, os.getpid()
        self.peak = self.procs = 0
        self.foreign_ticks = 0
        self._prev: dict[tuple[int, int], int] | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        procs = _procs()
        tree = _under(procs, self.root)
        self.peak = max(self.peak, sum(procs[p][2] for p in tree))
        self.procs = max(self.procs, len(tree))
        mine = _under(procs, self.me)
        cur = {(p, v[3]): v[1] for p, v in procs.items() if p not in mine}
        if self._prev is not None:
            # a process first seen now started after the last sample: count all its CPU time
            self.foreign_ticks += sum(c - self._prev.get(k, 0) for k, c in cur.items())
        self._prev = cur

    def _loop(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.5)

    def __enter__(self):
        self.t0, self.stat0 = time.perf_counter(), _cpu_stat()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._sample()
        wall = time.perf_counter() - self.t0
        d = [b - a for a, b in zip(self.stat0[:8], _cpu_stat()[:8])]  # user .. steal
        cores = os.cpu_count() or 1
        self.result = {"peak_rss_gib": self.peak / 2**30, "max_procs": self.procs,
                       "foreign_cpu_s": self.foreign_ticks / CLK,
                       "foreign_cpu_share": self.foreign_ticks / CLK / (cores * wall),
                       "machine_busy_share": (sum(d) - d[3] - d[4]) / max(1, sum(d)),
                       "steal_s": d[7] / CLK if len(d) > 7 else None}


# ---------------------------------------------------------------------------------------------
# figures of a run

def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "min": None, "median": None}
    return {"n": len(values), "min": min(values), "median": statistics.median(values)}


def round_figures(recs: list[dict], skip: int = 1) -> dict:
    """Per-round (or per-update) wall and client compute of the records after the first ``skip``."""
    measured = [r for r in recs if r["round"] > skip]
    return {"first_wall_s": next((r["wall_s"] for r in recs if r["round"] == 1), None),
            "wall": stats([r["wall_s"] for r in measured]),
            "compute": stats([r["client_compute_s"] for r in measured]),
            "compute_max": stats([r["client_compute_max_s"] for r in measured]),
            "participants": statistics.median([r["participants"] for r in measured]) if measured else None,
            "rounds_measured": [r["round"] for r in measured],
            "wall_all": [round(r["wall_s"], 4) for r in recs if r["round"] >= 1]}


def collect(run_dir: Path, keep_records: bool = False) -> dict:
    from zofl.results import read_rounds

    out = {}
    if (run_dir / "rounds.jsonl").exists():
        recs = read_rounds(run_dir)
        out["rounds"] = round_figures(recs)
        if keep_records:  # every round's figures (rounds >= 1), for the Table I analysis
            rs = [r for r in recs if r["round"] >= 1]
            out["records"] = {k: [round(r[k], 5) if isinstance(r[k], float) else r[k] for r in rs]
                              for k in ("round", "wall_s", "client_compute_s", "client_compute_max_s",
                                        "participants")}
    if (run_dir / "summary.json").exists():
        s = json.loads((run_dir / "summary.json").read_text())
        out["summary"] = {k: s.get(k) for k in ("total_wall_s", "total_client_compute_s", "final_test_acc",
                                                  "best_test_acc", "rounds")}
    return out


def parse_output(text: str, seq: bool = False) -> dict:
    """The partition-learning time and the hook's server timing (with its per-call ``seq`` if asked)."""
    out = {}
    m = PARTITIONS_RE.search(text)
    out["partitions_s"] = float(m.group(2)) if m else None
    for line in text.splitlines():
        if line.startswith(TIMING_PREFIX):
            out["server_timing"] = json.loads(line[len(TIMING_PREFIX):])
            calls = out["server_timing"].pop("seq", None)
            if seq:
                out["seq"] = calls
    return out


def fmt(v, nd=3):
    return "-" if v is None else f"{v:.{nd}f}"


# ---------------------------------------------------------------------------------------------
# one run through Flower (Ray) and one in-process run

PHASES = {  # first line of the `flwr run --stream` output that marks each phase
    "run_started": "Successfully started run",
    "simulation_started": "Starting Flower Simulation",
    "partitions_learned": "learned the partitions",
    "summary_printed": "  results: ",
    "strategy_finished": "Strategy execution finished",
}


def ray_run(sl, cfg: dict, m: int, timeout: float, keep_records: bool = False, seq: bool = False) -> dict:
    """``flwr run`` of ``cfg`` on SuperLink ``sl`` (as SuperLink.run), its output lines time-stamped."""
    from zofl.launch import PROJECT_DIR, flwr_run_command

    out = {"how": "ray", "load_start": load()}
    cmd = flwr_run_command("zofl", cfg, PROJECT_DIR, f"num-supernodes={m} client-resources-num-cpus=1")
    lines: list[str] = []
    phases: dict[str, float] = {}
    t = time.perf_counter()
    with Sampler(sl.proc.pid) as smp:
        proc = subprocess.Popen(cmd, env=sl.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def read():
            for line in proc.stdout:
                lines.append(line)
                for k, marker in PHASES.items():
                    if k not in phases and marker in line:
                        phases[k] = time.perf_counter() - t

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = f"timeout after {timeout:.0f}s"
        reader.join(10)
    text = "".join(lines)
    out.update(cmd_wall_s=time.perf_counter() - t, returncode=rc, load_end=load(), **smp.result,
               phases_s={k: round(v, 2) for k, v in phases.items()}, **parse_output(text, seq))
    out.update(collect(Path(cfg["output-dir"]) / cfg["run-name"], keep_records))
    if rc != 0 or "summary" not in out:
        out["error_tail"] = text[-3000:]
    return out


def inprocess_run(cfg: dict, workers: int, timeout: float, keep_records: bool = False, seq: bool = False) -> dict:
    """``zofl.inprocess.run_inprocess`` in a fresh child process (its own imports and data, as a Ray run)."""
    out = {"how": f"inprocess-w{workers}", "load_start": load()}
    code = ("import json, sys; from zofl.inprocess import run_inprocess; "
            "run_inprocess(json.loads(sys.argv[1]), workers=int(sys.argv[2]), start_method='spawn')")
    path = [p for p in (os.environ.get("PYTHONPATH"), str(HERE.parent)) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(cfg), str(workers)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with Sampler(proc.pid) as smp:
        try:
            text, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            text, _ = proc.communicate()
            rc = f"timeout after {timeout:.0f}s"
    out.update(cmd_wall_s=time.perf_counter() - t, returncode=rc, load_end=load(), **smp.result,
               **parse_output(text, seq))
    out.update(collect(Path(cfg["output-dir"]) / cfg["run-name"], keep_records))
    if rc != 0 or "summary" not in out:
        out["error_tail"] = text[-3000:]
    return out


# ---------------------------------------------------------------------------------------------
# parts

def scaling_cfg(data_dir: str, out_dir: str, m: int, work: str, engine: str, beta: float, rounds: int,
                name: str) -> dict:
    cfg = {"dataset": "fashion_mnist", "data-dir": data_dir, "num-clients": m, "alpha": 1000.0,
           "min-partition-size": 1, "beta": beta, "num-rounds": rounds + 1, "seed": 0, "client-wait-s": 600.0,
           "output-dir": out_dir, "run-name": name, "engine": engine, **WORK[work]}
    if engine == "async":
        k = max(1, round(beta * m))
        cfg.update(strategy="fedbuff", **{"buffer-size": k, "concurrency": k})
    return cfg


def round_floor(r: dict) -> None:
    """The run's physical floor per round (update): median client compute / 2 cores + the server's
    own work inside a round's wall_s (plan + update, per round, timed in this run). A round's wall_s
    runs from the plan to the update; evaluation, record and checkpoint follow it."""
    st = r.get("server_timing") or {}
    n = st.get("n_update")
    c = r.get("rounds", {}).get("compute", {}).get("median")
    r["server_round_s"] = (st.get("plan", 0.0) + st.get("update", 0.0)) / n if n else None
    r["eval_record_round_s"] = ((st.get("metrics", 0.0) + st.get("write_round", 0.0) + st.get("checkpoint", 0.0))
                                / n if n else None)
    r["floor_round_s"] = None if c is None or not n else c / 2 + r["server_round_s"]


def print_row(r: dict) -> None:
    rd = r.get("rounds", {})
    w, c = rd.get("wall", {}), rd.get("compute", {})
    print(f"  m={r['m']:<5} {r['work']:<4} {r['engine']:<10} per {'update' if r['engine'] == 'async' else 'round '}"
          f" median {fmt(w.get('median'))} s (min {fmt(w.get('min'))}), floor {fmt(r.get('floor_round_s'))} s "
          f"(client compute {fmt(c.get('median'))} s), first {fmt(rd.get('first_wall_s'), 2)} s, "
          f"partitions {fmt(r.get('partitions_s'), 2)} s, peak RSS {r['peak_rss_gib']:.2f} GiB, "
          f"command {r['cmd_wall_s']:.1f} s, other work {100 * r['foreign_cpu_share']:.0f}% of the cores, "
          f"load {r['load_start'][0]}->{r['load_end'][0]}"
          + (f"  rc={r['returncode']}" if r["returncode"] != 0 else ""), flush=True)


def part_scaling(args, tmp: Path) -> list[dict]:
    from zofl.launch import local_superlink

    results = []
    for m in [int(s) for s in args.clients.split(",")]:
        beta = 1.0 if m <= 100 else args.beta_1000
        rounds = args.rounds if m < 1000 else args.rounds_1000
        print(f"[scaling] m = {m}, beta = {beta}, {rounds} measured rounds (+1 dropped)", flush=True)
        with local_superlink(tmp / f"superlink-{m}") as sl:
            for work in ("noop", "real"):
                for engine in ("sync", "legacy", "async", "inprocess"):
                    eng = "sync" if engine == "inprocess" else engine
                    cfg = scaling_cfg(args.data_dir, str(tmp / "out"), m, work, eng, beta, rounds,
                                      f"scale-{m}-{work}-{engine}")
                    if engine == "inprocess":
                        r = inprocess_run(cfg, workers=2, timeout=args.run_timeout)
                    else:
                        r = ray_run(sl, cfg, m, timeout=args.run_timeout)
                    r.update(m=m, work=work, engine=engine, beta=beta, config=cfg)
                    round_floor(r)
                    print_row(r)
                    results.append(r)
    return results


OURS, FLOWER = "fedavg", "flwr-fedavg"  # the overhead part's pair: our MessageStrategy, Flower's FedAvg


def overhead_rounds(r: dict, cfg: dict) -> dict:
    """Per-round figures of one overhead run from the hook's per-call times and the run's records.

    Round k's period runs from configure_train(k) to configure_train(k+1): the whole round as Flower's
    Strategy.start runs it (messages out, clients, replies in, aggregation, evaluation, record,
    checkpoint, the empty evaluate step). Round 1 is dropped and the last round has no period, so
    ``num-rounds`` = measured + 2. Per round: own = configure_train + aggregate_train (the strategy's
    code); core = plan + complete (S_r and the Works, checks, update, evaluation, record, checkpoint:
    the server's own steps); wire = own - core (building and reading messages, Flower's FedAvg
    code); engine = period - own (push, Ray, the ClientApps, pull, Strategy.start);
    floor = client compute / 2 cores + core."""
    from zofl.results import read_rounds

    seq = r.pop("seq", None) or {}
    conf, agg = seq.get("configure_train", []), seq.get("aggregate_train", [])
    sends, plans, comps = seq.get("send_and_receive", []), seq.get("plan", []), seq.get("complete", [])
    folder = Path(cfg["output-dir"]) / cfg["run-name"]
    recs = {rec["round"]: rec for rec in read_rounds(folder)} if (folder / "rounds.jsonl").exists() else {}
    rows = []
    for k in range(2, len(conf)):  # 1-based round k, period conf[k-1] -> conf[k]
        (t0, dc), (t1, _) = conf[k - 1], conf[k]
        ta, da = agg[k - 1]
        plan = sum(d for t, d in plans if t0 <= t < ta)
        core = sum(d for t, d in comps if ta <= t < t1)
        send = sum(d for t, d in sends if t0 + dc <= t < ta)
        rec = recs.get(k, {})
        c = rec.get("client_compute_s", 0.0)
        rows.append({"round": k, "period_s": t1 - t0, "own_s": dc + da, "core_s": plan + core,
                     "wire_s": dc + da - plan - core, "send_s": send, "engine_s": t1 - t0 - dc - da,
                     "client_compute_s": c, "floor_s": c / 2 + plan + core,
                     "uplink_bytes": rec.get("uplink_bytes"), "downlink_bytes": rec.get("downlink_bytes"),
                     "participants": rec.get("participants")})
    med = {key: statistics.median([row[key] for row in rows]) if rows else None
           for key in ("period_s", "own_s", "core_s", "wire_s", "send_s", "engine_s", "client_compute_s",
                       "floor_s", "uplink_bytes", "downlink_bytes", "participants")}
    return {"per_round": med, "periods_s": [round(row["period_s"], 5) for row in rows],
            "measured_rounds": len(rows)}


def median_ci(values: list[float]) -> tuple[float | None, float | None, float | None, float | None]:
    """(median, lower, upper, coverage): the distribution-free interval for the median from order
    statistics x_(j) .. x_(n+1-j), j the largest with coverage >= 95% (j = 1 below n = 6: then the
    range, with the coverage it has, 1 - 2^(1-n))."""
    v = sorted(values)
    n = len(v)
    if not n:
        return None, None, None, None
    cover = lambda j: 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2 ** n  # noqa: E731
    j = 1
    while j + 1 <= (n + 1) // 2 and cover(j + 1) >= 0.95:
        j += 1
    return statistics.median(v), v[j - 1], v[n - j], cover(j)


def ratio_ci(ratios: list[float]) -> dict:
    """Paired ratios: geometric mean with its 95% Student-t interval (on the logs), median, range."""
    logs = [math.log(x) for x in ratios]
    n = len(logs)
    out = {"n": n, "ratios": [round(x, 4) for x in ratios], "median": statistics.median(ratios) if n else None,
           "min": min(ratios, default=None), "max": max(ratios, default=None),
           "geomean": math.exp(statistics.fmean(logs)) if n else None, "lo": None, "hi": None}
    if n >= 2:
        from scipy import stats as st

        h = float(st.t.ppf(0.975, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
        out["lo"], out["hi"] = math.exp(statistics.fmean(logs) - h), math.exp(statistics.fmean(logs) + h)
    return out


def print_overhead_row(r: dict) -> None:
    f = r.get("per_round") or {}
    print(f"  m={r['m']:<4} {r['how']:<12} rep {r['rep']} {r['strategy']:<12} s/round {fmt(f.get('period_s'), 4)} "
          f"(floor {fmt(f.get('floor_s'), 4)}: compute {fmt(f.get('client_compute_s'), 4)} / 2 + core "
          f"{fmt(f.get('core_s'), 4)}; wire {fmt(f.get('wire_s'), 4)}, engine {fmt(f.get('engine_s'), 4)}), "
          f"bytes down {f.get('downlink_bytes')} up {f.get('uplink_bytes')}, command {r['cmd_wall_s']:.1f} s, "
          f"other work {100 * r['foreign_cpu_share']:.0f}% of the cores, load {r['load_start'][0]}->"
          f"{r['load_end'][0]}" + (f"  rc={r['returncode']}" if r["returncode"] != 0 else ""), flush=True)


def overhead_summary(runs: list[dict]) -> list[dict]:
    """Per (m, how): each strategy's seconds per round (median over repeats and its 95% interval), the
    paired ratio ours / Flower's, the floor and the split of a round."""
    out = []
    for m, how in dict.fromkeys((r["m"], r["how"]) for r in runs):
        group = [r for r in runs if r["m"] == m and r["how"] == how and r.get("per_round", {}).get("period_s")]
        row = {"m": m, "how": how}
        by = {}
        for strat in (OURS, FLOWER):
            rs = {r["rep"]: r for r in group if r["strategy"] == strat}
            by[strat] = rs
            per = lambda key: [r["per_round"][key] for r in rs.values()]  # noqa: E731
            med, lo, hi, cov = median_ci(per("period_s"))
            row[strat] = {"n": len(rs), "s_per_round": med, "lo": lo, "hi": hi, "coverage": cov,
                          **{k: statistics.median(per(k)) if rs else None
                             for k in ("floor_s", "client_compute_s", "own_s", "core_s", "wire_s", "engine_s",
                                       "send_s", "downlink_bytes", "uplink_bytes", "participants")},
                          "final_test_acc": sorted({(r.get("summary") or {}).get("final_test_acc")
                                                    for r in rs.values()}, key=str)}
        reps = sorted(set(by[OURS]) & set(by[FLOWER]))
        row["ratio"] = ratio_ci([by[OURS][k]["per_round"]["period_s"] / by[FLOWER][k]["per_round"]["period_s"]
                                 for k in reps])
        # the strategies' own code alone (configure_train + aggregate_train), without the engine between them
        row["own_ratio"] = ratio_ci([by[OURS][k]["per_round"]["own_s"] / by[FLOWER][k]["per_round"]["own_s"]
                                     for k in reps])
        a, b = row[OURS], row[FLOWER]
        if a["s_per_round"] and b["s_per_round"]:
            row["ratio_of_medians"] = a["s_per_round"] / b["s_per_round"]
        out.append(row)
        rc, ro = row["ratio"], row["own_ratio"]
        print(f"  m={m:<4} {how:<12} ours {fmt(a['s_per_round'], 4)} [{fmt(a['lo'], 4)}, {fmt(a['hi'], 4)}] s/round, "
              f"Flower's {fmt(b['s_per_round'], 4)} [{fmt(b['lo'], 4)}, {fmt(b['hi'], 4)}] "
              f"(n = {a['n']}, {b['n']}; coverage {fmt(a['coverage'], 3)}); ratio {fmt(rc['geomean'])} "
              f"[{fmt(rc['lo'])}, {fmt(rc['hi'])}] (median {fmt(rc['median'])}, range {fmt(rc['min'])}-"
              f"{fmt(rc['max'])}); floor {fmt(a['floor_s'], 4)} / {fmt(b['floor_s'], 4)} s; strategy code "
              f"{fmt(a['own_s'], 4)} / {fmt(b['own_s'], 4)} s (ratio {fmt(ro['geomean'])} [{fmt(ro['lo'])}, "
              f"{fmt(ro['hi'])}]) of which wire {fmt(a['wire_s'], 4)} / {fmt(b['wire_s'], 4)} s; engine "
              f"{fmt(a['engine_s'], 4)} / {fmt(b['engine_s'], 4)} s; bytes down {a['downlink_bytes']:.0f} / "
              f"{b['downlink_bytes']:.0f}, up {a['uplink_bytes']:.0f} / {b['uplink_bytes']:.0f}", flush=True)
    return out


def part_overhead(args, tmp: Path) -> dict:
    from zofl.launch import local_superlink

    ms = [int(x) for x in args.overhead_clients.split(",")]
    hows = [h for h in args.overhead_engines.split(",") if h]
    n_rounds = args.overhead_rounds
    print(f"[overhead] no-op clients, m in {ms}, {args.repeats} repeats of ours / Flower's FedAvg in alternating "
          f"order, {n_rounds} measured rounds per run (+1 dropped, +1 without a period), {hows}", flush=True)
    runs = []
    for m in ms:
        with local_superlink(tmp / f"superlink-overhead-{m}") if "ray" in hows else contextlib.nullcontext() as sl:
            for rep in range(args.repeats):
                order = (OURS, FLOWER) if rep % 2 == 0 else (FLOWER, OURS)  # A B, B A, ...: a drift cancels
                for how in hows:
                    for strat in order:
                        name = f"overhead-{m}-{how}-{strat}-{rep}"
                        cfg = {**scaling_cfg(args.data_dir, str(tmp / "out"), m, "noop", "sync", 1.0, n_rounds + 1,
                                             name), "strategy": strat}
                        if how == "ray":
                            r = ray_run(sl, cfg, m, timeout=args.run_timeout, seq=True)
                        else:
                            r = inprocess_run(cfg, workers=2, timeout=args.run_timeout, seq=True)
                        r.update(m=m, how="ray" if how == "ray" else "inprocess-w2", strategy=strat, rep=rep,
                                 config=cfg, **overhead_rounds(r, cfg))
                        r.pop("rounds", None)
                        print_overhead_row(r)
                        if r.get("error_tail"):
                            print(r["error_tail"], flush=True)
                        runs.append(r)
    print("[overhead] per configuration: median [95% interval] over repeats; ratio = geometric mean of the paired "
          "ratios ours / Flower's [95% t interval]", flush=True)
    return {"runs": runs, "summary": overhead_summary(runs)}


def part_memory(args, tmp: Path, scaling: list[dict]) -> list[dict]:
    keys = ("m", "work", "engine", "peak_rss_gib", "max_procs", "cmd_wall_s", "partitions_s")
    big = [r for r in scaling if r["m"] == 1000]
    if big:
        return [{k: r.get(k) for k in keys} for r in big]
    from zofl.launch import local_superlink

    cfg = scaling_cfg(args.data_dir, str(tmp / "out"), 1000, "real", "sync", args.beta_1000, args.rounds_1000,
                      "memory-1000")
    with local_superlink(tmp / "superlink-memory") as sl:
        r = ray_run(sl, cfg, 1000, timeout=args.run_timeout)
    r.update(m=1000, work="real", engine="sync", beta=args.beta_1000, config=cfg)
    round_floor(r)
    print_row(r)
    return [{k: r.get(k) for k in keys}]


def part_diag() -> list[dict]:
    """Flower's simulation engine hands messages to the Ray actors from a thread that, every 0.1 s,
    calls ``state.get_message_ins(node_id, limit=1)`` for every node (vce_api.add_messages_to_queue).
    Time such passes on Flower's own InMemoryLinkState holding one query message per node."""
    import dataclasses

    from flwr.app import Message, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.proto.task_pb2 import Task  # pylint: disable=no-name-in-module
    from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    out = []
    for nodes_n, msgs_n in ((100, 100), (1000, 100), (1000, 1000)):
        sf = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
        state = sf.state()
        run = dataclasses.replace(Run.create_empty(7), primary_task_id=11, federation_id=NOOP_FEDERATION_ID)
        state.run_ids[run.run_id] = RunRecord(run=run)
        state.task_store[11] = Task(task_id=11, run_id=7)
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 11, 7, SUPERLINK_NODE_ID
        nodes = list(_register_nodes(nodes_n, sf))
        grid = InMemoryGrid(state_factory=sf)
        grid.set_run(run)
        t = time.perf_counter()
        grid.push_messages([Message(RecordDict(), dst_node_id=n, message_type="query.partition")
                            for n in nodes[:msgs_n]])
        push_s = time.perf_counter() - t
        passes = []
        for _ in range(2):
            t = time.perf_counter()
            got = sum(len(state.get_message_ins(node_id=n, limit=1)) for n in nodes)
            passes.append((time.perf_counter() - t, got))
        row = {"nodes": nodes_n, "messages": msgs_n, "push_s": push_s, "pass_delivering_s": passes[0][0],
               "delivered": passes[0][1], "pass_after_delivery_s": passes[1][0]}
        print(f"  {nodes_n} nodes, {msgs_n} messages: push {push_s:.3f} s, extractor pass {passes[0][0]:.3f} s "
              f"(delivers {passes[0][1]}), next pass {passes[1][0]:.3f} s (messages delivered, replies pending)",
              flush=True)
        out.append(row)
    return out


def part_table1(args, tmp: Path) -> dict:
    from zofl.launch import local_superlink

    cfg = {"strategy": "zohfl", "dataset": "fashion_mnist", "data-dir": args.data_dir, "num-clients": 10,
           "alpha": 1.0, "beta": 0.5, "tau": 20.0, "num-rounds": args.table1_rounds, "seed": 0,
           "output-dir": str(tmp / "out")}
    res = {"config": cfg}
    print(f"[table1] ZO-HFL, Fashion-MNIST, m=10, alpha=1, beta=0.5, tau=20, R={args.table1_rounds}", flush=True)
    with local_superlink(tmp / "superlink-table1") as sl:
        res["ray"] = ray_run(sl, {**cfg, "run-name": "table1-ray"}, 10, timeout=args.run_timeout * 4,
                             keep_records=True)
    for w in (2, 0):
        res[f"inprocess_w{w}"] = inprocess_run({**cfg, "run-name": f"table1-inprocess-w{w}"}, workers=w,
                                               timeout=args.run_timeout * 4, keep_records=True)
    res["analysis"] = table1_analysis(res)
    for key in ("ray", "inprocess_w2", "inprocess_w0"):
        r, a = res[key], res["analysis"].get(key, {})
        print(f"  {key:<12} command {r['cmd_wall_s']:.1f} s, ServerApp {fmt(a.get('wall_serverapp_s'), 1)} s, floor "
              f"{fmt(a.get('floor_s'), 1)} s (client compute {fmt(a.get('client_compute_s'), 1)} s / "
              f"{a.get('cores')} + server {fmt(a.get('server_s'), 1)} s): ratio {fmt(a.get('ratio_serverapp'), 2)} "
              f"(command {fmt(a.get('ratio_command'), 2)}); round barrier +{fmt(a.get('barrier_excess_s'), 1)} s, "
              f"engine {fmt(a.get('engine_per_round_after_r1_s'))} s/round after round 1, round 1 "
              f"{fmt(a.get('round1_wall_s'), 1)} s, outside the ServerApp {fmt(a.get('outside_serverapp_s'), 1)} s; "
              f"other work {100 * r['foreign_cpu_share']:.0f}% of the cores", flush=True)
    return res


def table1_analysis(res: dict) -> dict:
    """Per run: floor = its summed client compute / cores + its server compute S (timed directly in
    the run: make_run is outside the ServerApp's total_wall_s; S = SyncRun init (x_0, round-0
    evaluation) + plan + complete (checks, update, evaluation, record, checkpoint, summary)).
    ServerApp wall W = S + M + E: M the synchronous rounds' client time on the cores (a round waits
    for its busier core: ceil(p/2) of p clients, clients taken as equal), E what the engine adds."""
    out = {}
    for key in ("ray", "inprocess_w2", "inprocess_w0"):
        r = res[key]
        s, st, rec = r.get("summary") or {}, r.get("server_timing") or {}, r.get("records")
        if not s or not st or not rec:
            continue
        cores = 1 if key == "inprocess_w0" else 2
        C, W = s["total_client_compute_s"], s["total_wall_s"]
        S = st.get("run_init", 0.0) + st.get("plan", 0.0) + st.get("complete", 0.0)
        floor = C / cores + S
        M = sum(-(-p // cores) * c / p for p, c in zip(rec["participants"], rec["client_compute_s"]) if p)
        p1, c1, w1 = rec["participants"][0], rec["client_compute_s"][0], rec["wall_s"][0]
        m1 = -(-p1 // cores) * c1 / p1 if p1 else 0.0
        R = len(rec["wall_s"])
        out[key] = {
            "cores": cores, "client_compute_s": C, "server_s": S, "floor_s": floor, "wall_serverapp_s": W,
            "ratio_serverapp": W / floor, "wall_command_s": r["cmd_wall_s"],
            "floor_command_s": floor + st.get("make_run", 0.0),
            "ratio_command": r["cmd_wall_s"] / (floor + st.get("make_run", 0.0)),
            "outside_serverapp_s": r["cmd_wall_s"] - W,
            "server_make_run_s": st.get("make_run"), "server_init_s": st.get("run_init"),
            "server_plan_s": st.get("plan"), "server_update_s": st.get("update"),
            "server_metrics_s": st.get("metrics"), "server_write_round_s": st.get("write_round"),
            "server_checkpoint_s": st.get("checkpoint"),
            "round_barrier_s": M, "barrier_excess_s": M - C / cores, "engine_s": W - S - M,
            "round1_wall_s": w1, "engine_per_round_after_r1_s": (W - S - M - (w1 - m1)) / max(1, R - 1),
            "round_wall_median_s": statistics.median(rec["wall_s"]),
            "wall_minus_compute_s": W - C if cores == 1 else None,
            "final_test_acc": s.get("final_test_acc"),
        }
    return out


# ---------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", help="absolute folder holding fashion_mnist.npz (required unless --summarize)")
    ap.add_argument("--clients", default="10,100,1000", help="comma list of client counts (scaling)")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per run (round 1 is dropped)")
    ap.add_argument("--rounds-1000", type=int, default=3, help="measured rounds per run at 1,000 clients")
    ap.add_argument("--beta-1000", type=float, default=0.1, help="beta at 1,000 clients (100 clients per round)")
    ap.add_argument("--table1-rounds", type=int, default=500)
    ap.add_argument("--run-timeout", type=float, default=900.0, help="seconds before a run is stopped (x4: table1)")
    ap.add_argument("--overhead-clients", default="10,100", help="comma list of client counts (overhead)")
    ap.add_argument("--overhead-rounds", type=int, default=20, help="measured rounds per overhead run")
    ap.add_argument("--overhead-engines", default="ray,inprocess",
                    help="comma list of ray (flwr run) and inprocess (2 spawned workers) for the overhead part")
    ap.add_argument("--repeats", type=int, default=6, help="runs of each strategy per configuration (overhead)")
    ap.add_argument("--summarize", metavar="JSON",
                    help="print the overhead part's summary again from a report written by --out (runs nothing)")
    ap.add_argument("--part", action="append", choices=("scaling", "memory", "diag", "table1", "overhead"),
                    help="run only these parts (repeatable); default: all")
    ap.add_argument("--out", help="write every figure as JSON to this file")
    ap.add_argument("--keep", help="keep run folders and SuperLink logs in this folder (default: a temp folder)")
    args = ap.parse_args()
    if args.summarize:
        overhead_summary(json.loads(Path(args.summarize).read_text())["overhead"]["runs"])
        return
    if not args.data_dir:
        ap.error("--data-dir is required")
    args.data_dir = str(Path(args.data_dir).resolve())
    parts = args.part or ["scaling", "memory", "diag", "table1"]  # overhead: only when named

    report = {"command": "python benchmarks/bench_engines.py " + " ".join(sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "nproc": os.cpu_count(),
              "machine": platform.machine(), "python": platform.python_version(), "load_start": load(),
              "parts": parts}
    import flwr
    import numpy
    import ray

    report["versions"] = {"flwr": flwr.__version__, "ray": ray.__version__, "numpy": numpy.__version__}
    print(f"bench_engines: {report['nproc']} cores, load {report['load_start']}, parts {parts}", flush=True)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zofl-bench-engines-") as tmpd:
        tmp = Path(args.keep or tmpd)
        tmp.mkdir(parents=True, exist_ok=True)
        hook = tmp / "hook"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(HOOK)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)

        scaling: list[dict] = []
        if "scaling" in parts:
            scaling = part_scaling(args, tmp)
            report["scaling"] = scaling
        if "memory" in parts:
            print("[memory] peak RSS of all processes of a run at 1,000 clients", flush=True)
            report["memory"] = part_memory(args, tmp, scaling)
            for r in report["memory"]:
                print(f"  {r['engine']:<10} {r['work']:<4} {r['peak_rss_gib']:.2f} GiB ({r['max_procs']} processes)",
                      flush=True)
        if "diag" in parts:
            print("[diag] Flower's simulation message extractor over its InMemoryLinkState", flush=True)
            report["diag"] = part_diag()
        if "table1" in parts:
            report["table1"] = part_table1(args, tmp)
        if "overhead" in parts:
            report["overhead"] = part_overhead(args, tmp)
    report["load_end"] = load()
    report["total_s"] = time.perf_counter() - t_all
    print(f"bench_engines: done in {report['total_s']:.0f} s, load {report['load_start']} -> {report['load_end']}",
          flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
