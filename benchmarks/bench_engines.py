"""Benchmark: the engines side by side (message, legacy, async through Ray; in-process), the cost of
learning which node holds which partition, peak memory at 1,000 clients, and a Table I cell
against its physical floor. Every figure comes from one invocation, runs interleaved.

    python benchmarks/bench_engines.py --data-dir /tmp/zofl-data --out docs/benchmark-engines.json

Parts (``--part``, repeatable; default all):
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

Work: noop = fedavg, tau = 0, local-steps = 0 (0 local steps; the client still decodes, loads its
data once per process and replies with its model); real = fedavg, tau = 20 (K = 2 ceil(20 sqrt(r+1))
local SGD steps, batch 32). Scaling runs use Fashion-MNIST, alpha = 1000 (near-equal splits),
min-partition-size 1, seed 0; beta = 1 up to 100 clients and --beta-1000 (0.1) at 1,000. The async
engine gets buffer-size = concurrency = clients per synchronous round, so one update aggregates as
many replies as one round.

Instrumentation without touching the App: the script writes a ``sitecustomize.py`` (HOOK) to a
temporary folder on PYTHONPATH of every process it starts. It sends the "zofl" logger's partition
line and warnings to stdout (the App configures no handler, so Flower's stream does not show them)
and, when ``zofl.server_app`` is imported, wraps the server's own steps (make_run, SyncRun init /
plan / complete, the method's update and metrics, the round record, the checkpoint) with timers
whose totals are printed when the run finishes.
"""
from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(HERE.parent))

PARTITIONS_RE = re.compile(r"learned the partitions of (\d+) SuperNodes in ([0-9.]+)s")
TIMING_PREFIX = "zofl-bench-timing "
WORK = {
    "noop": {"strategy": "fedavg", "tau": 0.0, "local-steps": 0},
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


def _wrap(owner, name, key):
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "_bench_wrapped", False):
        return

    def timed(*a, **k):
        t = _time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            _TIMES[key] = _TIMES.get(key, 0.0) + _time.perf_counter() - t
            _TIMES["n_" + key] = _TIMES.get("n_" + key, 0) + 1

    timed._bench_wrapped = True
    setattr(owner, name, timed)


def _instrument():
    import zofl.core.rounds as rounds
    import zofl.server_app as sa
    from zofl.methods import METHODS
    from zofl.results import ResultsWriter

    _wrap(sa, "make_run", "make_run")  # parse, load + split the data, server data, test set
    _wrap(rounds.SyncRun, "__init__", "run_init")  # x_0 (pretrain), round-0 evaluation and record
    _wrap(rounds.SyncRun, "plan", "plan")  # S_r, every sampled client's Work
    _wrap(rounds.SyncRun, "complete", "complete")  # checks, update, evaluation, record, checkpoint
    _wrap(rounds, "save_checkpoint", "checkpoint")
    _wrap(ResultsWriter, "write_round", "write_round")
    for entry in METHODS.values():
        _wrap(entry.server, "update", "update")
        _wrap(entry.server, "update_async", "update")
        _wrap(entry.server, "plan_task", "plan")
        _wrap(entry.server, "metrics", "metrics")  # evaluation of the new model
    finish = rounds.SyncRun.finish

    def finish_and_report(self, *a, **k):
        out = finish(self, *a, **k)
        print("zofl-bench-timing " + _json.dumps(_TIMES), flush=True)
        return out

    rounds.SyncRun.finish = finish_and_report


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


def parse_output(text: str) -> dict:
    out = {}
    m = PARTITIONS_RE.search(text)
    out["partitions_s"] = float(m.group(2)) if m else None
    for line in text.splitlines():
        if line.startswith(TIMING_PREFIX):
            out["server_timing"] = json.loads(line[len(TIMING_PREFIX):])
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


def ray_run(sl, cfg: dict, m: int, timeout: float, keep_records: bool = False) -> dict:
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
               phases_s={k: round(v, 2) for k, v in phases.items()}, **parse_output(text))
    out.update(collect(Path(cfg["output-dir"]) / cfg["run-name"], keep_records))
    if rc != 0 or "summary" not in out:
        out["error_tail"] = text[-3000:]
    return out


def inprocess_run(cfg: dict, workers: int, timeout: float, keep_records: bool = False) -> dict:
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
               **parse_output(text))
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
    ap.add_argument("--data-dir", required=True, help="absolute folder holding fashion_mnist.npz")
    ap.add_argument("--clients", default="10,100,1000", help="comma list of client counts (scaling)")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per run (round 1 is dropped)")
    ap.add_argument("--rounds-1000", type=int, default=3, help="measured rounds per run at 1,000 clients")
    ap.add_argument("--beta-1000", type=float, default=0.1, help="beta at 1,000 clients (100 clients per round)")
    ap.add_argument("--table1-rounds", type=int, default=500)
    ap.add_argument("--run-timeout", type=float, default=900.0, help="seconds before a run is stopped (x4: table1)")
    ap.add_argument("--part", action="append", choices=("scaling", "memory", "diag", "table1"),
                    help="run only these parts (repeatable); default: all")
    ap.add_argument("--out", help="write every figure as JSON to this file")
    ap.add_argument("--keep", help="keep run folders and SuperLink logs in this folder (default: a temp folder)")
    args = ap.parse_args()
    args.data_dir = str(Path(args.data_dir).resolve())
    parts = args.part or ["scaling", "memory", "diag", "table1"]

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
    report["load_end"] = load()
    report["total_s"] = time.perf_counter() - t_all
    print(f"bench_engines: done in {report['total_s']:.0f} s, load {report['load_start']} -> {report['load_end']}",
          flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
