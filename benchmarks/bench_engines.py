"""Benchmark: the engines side by side (message, legacy, async through Ray; in-process), the cost of
learning which node holds which partition, peak memory at 1,000 clients, and a Table I cell
against its physical floor. Every figure comes from one invocation, runs interleaved.

    python benchmarks/bench_engines.py --data-dir /tmp/zofl-data --out docs/benchmark-engines.json

Parts (``--part``, repeatable; default all):
  scaling     for m in --clients and work in {noop, real}: seconds per round of engine sync (Ray),
              legacy (Ray), in-process (InProcessGrid, 2 spawned workers, engine sync), and seconds
              per update of engine async (fedbuff, Ray). Round / update 1 (Ray and worker start-up,
              data loading) is dropped; min and median over the next --rounds (--rounds-1000 at
              1,000 clients). Every Flower run also gives the partition-learning time (its log line)
              and the peak RSS of its whole process tree.
  memory      peak RSS at 1,000 clients: taken from the scaling runs at 1,000 if there were any,
              otherwise one dedicated run (engine sync, real work).
  diag        what the partition learning costs inside Flower: one pass of the simulation engine's
              message extractor over Flower's InMemoryLinkState at 100 and 1,000 nodes.
  table1      ZO-HFL, Fashion-MNIST, m = 10, alpha 1, beta 0.5, R = --table1-rounds (500), tau 20:
              `flwr run` (engine sync, 10 SuperNodes, 2 Ray actors of 1 CPU), in-process with 2
              spawned workers, and in-process with workers = 0 (serial, one process) where the
              server's plan / update / evaluation / record / checkpoint are timed directly.

Work: noop = fedavg, tau = 0, local-steps = 0 (0 local steps; the client still decodes, loads its
data once per process and replies with its model); real = fedavg, tau = 20 (K = 2 ceil(20 sqrt(r+1))
local SGD steps, batch 32). Scaling runs use Fashion-MNIST, alpha = 1000 (near-equal splits),
min-partition-size 1, seed 0; beta = 1 up to 100 clients and --beta-1000 (0.1) at 1,000. The async
engine gets buffer-size = concurrency = clients per sync round, so one update aggregates as many
replies as one synchronous round (docs/benchmark-engines.md).

The script reads the ServerApp's "learned the partitions" log line through a sitecustomize hook it
writes to a temporary folder (put on PYTHONPATH for the processes it starts): the App configures no
handler for its "zofl" logger. Nothing in the App is changed.
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
sys.path.insert(0, str(HERE))

from bench_scale import _tree_rss  # noqa: E402

PARTITIONS_RE = re.compile(r"learned the partitions of (\d+) SuperNodes in ([0-9.]+)s")
WORK = {
    "noop": {"strategy": "fedavg", "tau": 0.0, "local-steps": 0},
    "real": {"strategy": "fedavg", "tau": 20.0},
}
HOOK = '''\
import logging as _logging
import sys as _sys


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
'''


# ---------------------------------------------------------------------------------------------
# helpers

def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class PeakRSS:
    """Samples every 0.5 s the RSS summed over a process and all its descendants (bench_scale)."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.procs = pid, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            rss, count = _tree_rss(self.pid)
            self.peak, self.procs = max(self.peak, rss), max(self.procs, count)
            self._stop.wait(0.5)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "min": None, "median": None}
    return {"n": len(values), "min": min(values), "median": statistics.median(values)}


def round_figures(recs: list[dict], skip: int = 1) -> dict:
    """Per-round (or per-update) wall and client compute of the records after the first ``skip``."""
    measured = [r for r in recs if r["round"] > skip]
    wall = [r["wall_s"] for r in measured]
    comp = [r["client_compute_s"] for r in measured]
    out = {"first_wall_s": next((r["wall_s"] for r in recs if r["round"] == 1), None),
           "wall": stats(wall), "compute": stats(comp),
           "compute_max": stats([r["client_compute_max_s"] for r in measured]),
           "participants": statistics.median([r["participants"] for r in measured]) if measured else None,
           "rounds_measured": [r["round"] for r in measured],
           "wall_all": [round(r["wall_s"], 4) for r in recs if r["round"] >= 1]}
    return out


def partition_seconds(text: str) -> float | None:
    m = PARTITIONS_RE.search(text)
    return float(m.group(2)) if m else None


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
    with PeakRSS(sl.proc.pid) as mem:
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
    out.update(cmd_wall_s=time.perf_counter() - t, returncode=rc, peak_rss_gib=mem.peak / 2**30,
               max_procs=mem.procs, load_end=load(), partitions_s=partition_seconds(text),
               phases_s={k: round(v, 2) for k, v in phases.items()})
    out.update(collect(Path(cfg["output-dir"]) / cfg["run-name"], keep_records))
    if rc != 0 or "summary" not in out:
        out["error_tail"] = text[-3000:]
    return out


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


def inprocess_run(cfg: dict, workers: int, timeout: float, timed: bool = False, keep_records: bool = False) -> dict:
    """run_inprocess in a fresh child process (its own imports and data, like a Ray run)."""
    out = {"how": f"inprocess-w{workers}", "load_start": load()}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_inprocess", json.dumps(cfg), str(workers),
           "1" if timed else "0"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    with PeakRSS(proc.pid) as mem:
        try:
            text, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            text, _ = proc.communicate()
            rc = f"timeout after {timeout:.0f}s"
    out.update(cmd_wall_s=time.perf_counter() - t, returncode=rc, peak_rss_gib=mem.peak / 2**30,
               max_procs=mem.procs, load_end=load(), partitions_s=partition_seconds(text))
    for line in text.splitlines():
        if line.startswith("BENCH-RESULT "):
            out["server_timing"] = json.loads(line[len("BENCH-RESULT "):])
    out.update(collect(Path(cfg["output-dir"]) / cfg["run-name"], keep_records))
    if rc != 0 or "summary" not in out:
        out["error_tail"] = text[-3000:]
    return out


def _inprocess_child(cfg_json: str, workers: int, timed: bool) -> None:
    """Child mode: run one in-process run; with ``timed``, time the server's own work."""
    import logging
    import threading as _th

    zl = logging.getLogger("zofl")
    if not zl.handlers:  # normally the sitecustomize hook (HOOK) has put its handler there already
        exec(compile(HOOK, "hook", "exec"), {})

    cfg = json.loads(cfg_json)
    times: dict[str, float] = {}
    main_thread = _th.main_thread()

    def wrap(owner, name, key):
        fn = getattr(owner, name)

        def timed_fn(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if _th.current_thread() is main_thread:  # the server's work, not a worker thread's
                    times[key] = times.get(key, 0.0) + time.perf_counter() - t

        setattr(owner, name, timed_fn)

    if timed:
        import zofl.core.rounds as rounds
        import zofl.server_app as server_app
        from zofl.methods import METHODS
        from zofl.results import ResultsWriter

        cls = METHODS[cfg["strategy"]].server
        wrap(server_app, "make_run", "make_run")  # parse, load + split data, server data, test set
        wrap(rounds.SyncRun, "__init__", "run_init")  # x_0 (pretrain) + round-0 evaluation and record
        wrap(rounds.SyncRun, "plan", "plan")  # S_r, per-client Work
        wrap(rounds.SyncRun, "complete", "complete")  # checks + update + evaluation + record + checkpoint
        wrap(cls, "update", "update")
        wrap(cls, "metrics", "metrics")  # evaluation of x_{r+1}: test acc/loss, f1
        wrap(ResultsWriter, "write_round", "write_round")
        wrap(rounds, "save_checkpoint", "checkpoint")
        wrap(rounds.SyncRun, "finish", "finish")

    from zofl.inprocess import run_inprocess

    t = time.perf_counter()
    run_inprocess(cfg, workers=workers, start_method="spawn")
    times["run_inprocess"] = time.perf_counter() - t
    print("BENCH-RESULT " + json.dumps(times), flush=True)


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


def print_row(r: dict) -> None:
    rd = r.get("rounds", {})
    w, c = rd.get("wall", {}), rd.get("compute", {})
    print(f"  m={r['m']:<5} {r['work']:<4} {r['engine']:<10} per {'update' if r['engine'] == 'async' else 'round '}"
          f" median {fmt(w.get('median'))} s (min {fmt(w.get('min'))}), client compute median "
          f"{fmt(c.get('median'))} s, floor {fmt(r.get('floor_round_s'))} s, first {fmt(rd.get('first_wall_s'), 2)} s, "
          f"partitions {fmt(r.get('partitions_s'), 2)} s, peak RSS {r['peak_rss_gib']:.2f} GiB, "
          f"command {r['cmd_wall_s']:.1f} s, load {r['load_start']}->{r['load_end']}"
          + (f"  rc={r['returncode']}" if r["returncode"] != 0 else ""), flush=True)


def part_scaling(args, tmp: Path) -> list[dict]:
    from zofl.launch import local_superlink

    results = []
    sizes = [int(s) for s in args.clients.split(",")]
    for m in sizes:
        beta = 1.0 if m <= 100 else args.beta_1000
        rounds = args.rounds if m < 1000 else args.rounds_1000
        print(f"[scaling] m = {m}, beta = {beta}, {rounds} measured rounds (+1 dropped)", flush=True)
        with local_superlink(tmp / f"superlink-{m}") as sl:
            for work in ("noop", "real"):
                cell = []
                for engine in ("sync", "legacy", "async", "inprocess"):
                    name = f"scale-{m}-{work}-{engine}"
                    eng = "sync" if engine == "inprocess" else engine
                    cfg = scaling_cfg(args.data_dir, str(tmp / "out"), m, work, eng, beta, rounds, name)
                    if engine == "inprocess":
                        r = inprocess_run(cfg, workers=2, timeout=args.run_timeout, timed=True)
                    else:
                        r = ray_run(sl, cfg, m, timeout=args.run_timeout)
                    r.update(m=m, work=work, engine=engine, beta=beta, config=cfg)
                    cell.append(r)
                # the per-round physical floor of each run: its own client compute / 2 cores, plus the
                # server's per-round work measured in the cell's in-process run (plan + update)
                # (a round's wall_s runs from plan to the update; evaluation, record and checkpoint follow it)
                ip = cell[-1].get("server_timing") or {}
                nrounds = rounds + 1
                server_round = (ip.get("plan", 0.0) + ip.get("update", 0.0)) / nrounds if ip else None
                for r in cell:
                    c = r.get("rounds", {}).get("compute", {}).get("median")
                    r["server_round_s"] = server_round
                    r["floor_round_s"] = None if c is None or server_round is None else c / 2 + server_round
                    print_row(r)
                results += cell
    return results


def part_memory(args, tmp: Path, scaling: list[dict]) -> list[dict]:
    big = [r for r in scaling if r["m"] == 1000]
    if big:
        return [{k: r.get(k) for k in ("m", "work", "engine", "peak_rss_gib", "max_procs", "cmd_wall_s")}
                for r in big]
    from zofl.launch import local_superlink

    cfg = scaling_cfg(args.data_dir, str(tmp / "out"), 1000, "real", "sync", args.beta_1000, args.rounds_1000,
                      "memory-1000")
    with local_superlink(tmp / "superlink-memory") as sl:
        r = ray_run(sl, cfg, 1000, timeout=args.run_timeout)
    r.update(m=1000, work="real", engine="sync", beta=args.beta_1000, config=cfg)
    print_row(r)
    return [{k: r.get(k) for k in ("m", "work", "engine", "peak_rss_gib", "max_procs", "cmd_wall_s",
                                   "partitions_s")}]


def part_diag() -> list[dict]:
    """One pass of Flower's simulation message extractor (vce_api.add_messages_to_queue, which runs
    every 0.1 s): get_message_ins(node, limit=1) for every node, on Flower's own InMemoryLinkState
    with one query message per node, as when the ServerApp learns the partitions."""
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
            passes.append({"s": time.perf_counter() - t, "delivered": got})
        row = {"nodes": nodes_n, "messages": msgs_n, "push_s": push_s, "pass_delivering_s": passes[0]["s"],
               "pass_after_delivery_s": passes[1]["s"], "delivered": passes[0]["delivered"]}
        print(f"  [diag] {nodes_n} nodes, {msgs_n} messages in flight: push {push_s:.3f} s, extractor pass "
              f"{passes[0]['s']:.3f} s (delivers {passes[0]['delivered']}), next pass {passes[1]['s']:.3f} s",
              flush=True)
        out.append(row)
    return out


def part_table1(args, tmp: Path) -> dict:
    from zofl.launch import local_superlink

    cfg = {"strategy": "zohfl", "dataset": "fashion_mnist", "data-dir": args.data_dir, "num-clients": 10,
           "alpha": 1.0, "beta": 0.5, "tau": 20.0, "num-rounds": args.table1_rounds, "seed": 0,
           "output-dir": str(tmp / "out")}
    res = {}
    print(f"[table1] ZO-HFL, Fashion-MNIST, m=10, alpha=1, beta=0.5, tau=20, R={args.table1_rounds}", flush=True)
    with local_superlink(tmp / "superlink-table1") as sl:
        res["ray"] = ray_run(sl, {**cfg, "run-name": "table1-ray"}, 10, timeout=args.run_timeout * 4,
                             keep_records=True)
    print(f"  ray: command {res['ray']['cmd_wall_s']:.1f} s, ServerApp "
          f"{fmt((res['ray'].get('summary') or {}).get('total_wall_s'), 1)} s, client compute "
          f"{fmt((res['ray'].get('summary') or {}).get('total_client_compute_s'), 1)} s, load "
          f"{res['ray']['load_start']}->{res['ray']['load_end']}", flush=True)
    for w in (2, 0):
        r = inprocess_run({**cfg, "run-name": f"table1-inprocess-w{w}"}, workers=w, timeout=args.run_timeout * 4,
                          timed=True, keep_records=True)
        res[f"inprocess_w{w}"] = r
        print(f"  in-process workers={w}: command {r['cmd_wall_s']:.1f} s, ServerApp "
              f"{fmt((r.get('summary') or {}).get('total_wall_s'), 1)} s, client compute "
              f"{fmt((r.get('summary') or {}).get('total_client_compute_s'), 1)} s, load "
              f"{r['load_start']}->{r['load_end']}", flush=True)
    res["analysis"] = table1_analysis(res, args.table1_rounds)
    for k, v in res["analysis"].items():
        print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}", flush=True)
    return res


def table1_analysis(res: dict, R: int) -> dict:
    """Floor = summed client compute / 2 cores + server compute, the latter timed directly (plan,
    complete = checks + update + evaluation + record + checkpoint (+ the summary), the x_0 set-up) in
    the serial in-process run. ServerApp wall W = S + M + E: S the server compute, M the synchronous
    rounds' client time on 2 cores (each round waits for its busier core: ceil(p/2) clients of
    compute / p each, clients assumed equal), E the engine's own time."""
    st = res["inprocess_w0"].get("server_timing") or {}
    S = sum(st.get(k, 0.0) for k in ("run_init", "plan", "complete"))  # finish() runs inside complete()
    a = {"server_compute_s": S, "server_make_run_s": st.get("make_run"), "server_init_s": st.get("run_init"),
         "server_plan_s": st.get("plan"), "server_complete_s": st.get("complete"), "server_update_s": st.get("update"),
         "server_metrics_s": st.get("metrics"), "server_write_round_s": st.get("write_round"),
         "server_checkpoint_s": st.get("checkpoint"), "server_finish_s": st.get("finish")}
    w0 = res["inprocess_w0"].get("summary") or {}
    if w0:
        a["w0_wall_minus_compute_s"] = w0["total_wall_s"] - w0["total_client_compute_s"]
    for key in ("ray", "inprocess_w2", "inprocess_w0"):
        r = res[key]
        s = r.get("summary") or {}
        if not s:
            continue
        cores = 1 if key == "inprocess_w0" else 2
        C = s["total_client_compute_s"]
        W = s["total_wall_s"]
        floor = C / cores + S
        a[f"{key}_client_compute_s"] = C
        a[f"{key}_floor_s"] = floor
        a[f"{key}_wall_serverapp_s"] = W
        a[f"{key}_ratio_serverapp"] = W / floor
        a[f"{key}_wall_command_s"] = r["cmd_wall_s"]
        a[f"{key}_ratio_command"] = r["cmd_wall_s"] / (floor + (st.get("make_run") or 0.0))
        a[f"{key}_outside_serverapp_s"] = r["cmd_wall_s"] - W  # start-up (Ray, app install), make_run, shutdown
        rec = r.get("records")
        if rec:
            if cores == 2:
                M = sum(-(-p // 2) * c / p for p, c in zip(rec["participants"], rec["client_compute_s"]) if p)
            else:
                M = C
            a[f"{key}_round_barrier_s"] = M
            a[f"{key}_barrier_excess_s"] = M - C / cores
            a[f"{key}_engine_s"] = W - S - M
            a[f"{key}_engine_per_round_s"] = (W - S - M) / len(rec["wall_s"])
            a[f"{key}_round_wall_median_s"] = statistics.median(rec["wall_s"])
            # round 1 also holds each worker's / actor's start: imports and loading its data
            p1, c1, w1 = rec["participants"][0], rec["client_compute_s"][0], rec["wall_s"][0]
            m1 = (-(-p1 // 2) * c1 / p1 if cores == 2 else c1) if p1 else 0.0
            a[f"{key}_round1_wall_s"] = w1
            a[f"{key}_engine_per_round_after_r1_s"] = (W - S - M - (w1 - m1)) / max(1, len(rec["wall_s"]) - 1)
    return a


# ---------------------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_inprocess":
        _inprocess_child(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return
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
    try:
        import flwr
        import numpy
        import ray

        report["versions"] = {"flwr": flwr.__version__, "ray": ray.__version__, "numpy": numpy.__version__}
    except ImportError:
        pass
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
            print("[memory] peak RSS of every process of a run at 1,000 clients", flush=True)
            report["memory"] = part_memory(args, tmp, scaling)
            for r in report["memory"]:
                print(f"  {r['engine']:<10} {r['work']:<4} {r['peak_rss_gib']:.2f} GiB ({r['max_procs']} processes)",
                      flush=True)
        if "diag" in parts:
            print("[diag] Flower's simulation extractor over InMemoryLinkState", flush=True)
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
