"""Fault-injection soak (issue 13, item 7): long runs with crashes, hangs, corrupt replies and one
SuperNode killed and restarted, in every engine; the totals of the failure policy and the final
model's finiteness, written to OUT/soak.json and OUT/soak.md (rows already there are kept, so the
script continues where it stopped).

    python experiments/soak.py --out docs/results/soak [--rounds 200] [--modes inprocess,deployment]
        [--engines sync,legacy,async]   (modes: inprocess, deployment, simulation, simulation-nokill)
    python experiments/soak.py --out docs/results/soak --merge /tmp/soak   (collect rows run elsewhere)

modes: ``inprocess`` (the App's in-process Grid: the same ServerApp, strategies and ClientApp, a
node killed and a new one started for its partition via ``run_inprocess(restart=...)``),
``deployment`` (a SuperLink and SuperNodes as separate processes with TLS and authentication:
``zofl.deploy.local_deployment``; SuperNode 1 is SIGKILLed at round R/3 and started again, with its
key, at round R/2) and ``simulation`` (Flower's Ray simulation, 6 simulated SuperNodes sharing the
machine's Ray workers, one CPU each: no SuperNode can be killed there, they live in the SuperLink's
process, so one of the Ray workers running the ClientApp actors is SIGKILLed at round R/3 instead;
clients also queue behind hung ones, which the totals tell apart); ``simulation-nokill``: the same
without the kill (Flower 1.41's Ray backend puts a dead actor back into its pool, so after the kill
every job given to it fails for the rest of the run: the faults alone need a run of their own).

Every run: m = 6 clients (``--clients``; the deployment rows use 3: a deployment round takes 15-17 s
with 6 SuperNodes on 2 cores, 10 s with 3), beta = 1, 10% crashes, 10% hangs (hang-s 6 s, round-deadline-s 3 s; in
deployment 40 s and 30 s), 10% corrupt replies; engines sync (ZO-HFL), legacy (ZO-HFL), async (FedBuff).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np

FAULTS = {"crash-prob": 0.1, "hang-prob": 0.1, "corrupt-prob": 0.1, "hang-s": 6.0, "round-deadline-s": 3.0}
M = 6
TOTALS = ("status", "failed_rounds", "total_sampled", "total_participants", "total_dropped", "total_failures",
          "total_late", "total_late_queued", "total_late_slow", "total_errors", "total_rejected", "total_lost",
          "rounds_model_rejected", "failures_by_client", "unheld_partitions", "refused_nodes",
          "rejoined_nodes", "final_test_acc", "total_wall_s")


# deployment: a reply takes seconds even for trivial work (a SuperNode polls the SuperLink every 3 s and
# starts a ClientApp process per message); measured on 2 busy cores: no reply within 3 s, nor within 12 s
# (docs/robustness.md), so the deadline and the hang are longer there
DEPLOYMENT_TIMES = {"round-deadline-s": 30.0, "hang-s": 40.0}
# the asynchronous engine gives a client up after reply-timeout-s without a reply; a deployment's first
# replies (a ClientApp process started per message, the SuperNode polling every 3 s) took over 20 s
DEPLOYMENT_ASYNC = {"reply-timeout-s": 60.0}


def set_clients(m: int) -> None:
    """m for this invocation (a row records its own)."""
    global M
    M = m


def run_config(engine: str, rounds: int, out: Path, name: str) -> dict:
    cfg = {"num-rounds": rounds, "num-clients": M, "beta": 1.0, "tau": 1.0, "output-dir": str(out),
           "run-name": name, "client-wait-s": 120.0, **FAULTS,
           **(DEPLOYMENT_TIMES if name.startswith("deployment") else {})}
    if engine == "async":
        cfg.update({"strategy": "fedbuff", "engine": "async", "local-steps": 2, "buffer-size": 3, "clock": "wall",
                    "reply-timeout-s": 20.0, **(DEPLOYMENT_ASYNC if name.startswith("deployment") else {})})
    else:
        cfg["engine"] = engine
    return cfg


def final_x(run_dir: Path) -> np.ndarray | None:
    ck = run_dir / "checkpoint.npz"
    if not ck.exists():
        return None
    with np.load(ck) as f:
        return np.array(f["x"])


def soak_inprocess(engine: str, rounds: int, out: Path) -> Path:
    from zofl.inprocess import run_inprocess

    name = f"inprocess-{engine}"
    cfg = run_config(engine, rounds, out / "cells", name)
    try:  # one worker process per client, as one SuperNode per client: a hung client blocks no other
        run_inprocess(cfg, workers=M, restart={1: (rounds // 3, rounds // 2)})
    except Exception as exc:  # noqa: BLE001 - a failed soak run is a result, recorded as such
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return out / "cells" / name


def soak_deployment(engine: str, rounds: int, out: Path) -> Path:
    import subprocess

    from zofl.deploy import local_deployment
    from zofl.launch import flwr_run_command
    from zofl.results import read_rounds

    name = f"deployment-{engine}"
    cfg = run_config(engine, rounds, out / "cells", name)
    run_dir = out / "cells" / name

    def at_round(k: int, proc) -> bool:
        while proc.poll() is None:
            if (run_dir / "rounds.jsonl").exists() and len(read_rounds(run_dir)) > k:
                return True
            time.sleep(1.0)
        return False

    with local_deployment(out / f"deploy-{engine}", num_supernodes=M, tls=True) as dep:
        proc = subprocess.Popen(flwr_run_command("deploy", cfg), env=dep.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        victim = dep.procs[len(dep.procs) - M + 1]  # procs: SuperLink, [fleet proxy,] SuperNode 0, SuperNode 1, ...
        if at_round(rounds // 3, proc):
            os.killpg(victim.pid, signal.SIGKILL)
            if at_round(rounds // 2, proc):
                key = dep.work / "keys" / "supernode-1"
                dep.start_supernode(1, M, key if dep.auth else None, "supernode-1-restarted.log")
        proc.wait()
    return run_dir


def ray_actors(home: Path) -> list[int]:
    """PIDs of the Ray workers running Flower's ClientApp actors of the SuperLink with FLWR_HOME = home."""
    from zofl.launch import processes_with_env

    pids = []
    for pid in processes_with_env("FLWR_HOME", str(home)):
        try:
            if b"ClientAppActor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except OSError:
            continue
    return sorted(pids)


def soak_simulation(engine: str, rounds: int, out: Path, kill: bool = True) -> Path:
    import subprocess

    from zofl.launch import flwr_run_command, local_superlink

    name = f"simulation-{engine}" if kill else f"simulation-nokill-{engine}"
    cfg = run_config(engine, rounds, out / "cells", name)
    run_dir = out / "cells" / name
    with local_superlink() as sl:
        proc = subprocess.Popen(flwr_run_command("zofl", cfg, federation_config=f"num-supernodes={M} "
                                                 "client-resources-num-cpus=1"),
                                env=sl.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if kill and _at_round(run_dir, rounds // 3, proc):  # the simulation's analogue of a killed SuperNode
            actors = ray_actors(sl.home)
            if actors:
                os.kill(actors[0], signal.SIGKILL)
                print(f"{name}: SIGKILLed Ray actor {actors[0]} of {actors} at round {rounds // 3}", flush=True)
                (run_dir / "killed-actor.txt").write_text(f"{actors[0]} of {actors} at round {rounds // 3}\n")
        proc.wait()
    return run_dir


def _at_round(run_dir: Path, k: int, proc) -> bool:
    from zofl.results import read_rounds

    while proc.poll() is None:
        if (run_dir / "rounds.jsonl").exists() and len(read_rounds(run_dir)) > k:
            return True
        time.sleep(1.0)
    return False


def row(mode: str, engine: str, run_dir: Path) -> dict:
    summary_path = run_dir / "summary.json"
    s = json.loads(summary_path.read_text()) if summary_path.exists() else {"status": "no summary"}
    x = final_x(run_dir)
    return {"mode": mode, "engine": engine, **{k: s.get(k) for k in TOTALS},
            "final_x_finite": bool(x is not None and np.all(np.isfinite(x)))}


def write_md(rows: list[dict], out: Path, rounds: int) -> None:
    cols = ["mode", "engine", "clients", "status", "failed_rounds", "total_sampled", "total_participants",
            "total_dropped", "total_failures", "total_late", "total_late_queued", "total_late_slow", "total_errors",
            "total_rejected", "total_lost", "rounds_model_rejected", "rejoined", "final_test_acc", "final_x_finite",
            "soak_wall_s"]
    lines = [f"# Fault-injection soak: {rounds} rounds, m clients (6 unless the row says), 10% crashes / hangs / "
             "corrupt replies, one SuperNode killed at R/3 and restarted at R/2", "",
             "Written by `python experiments/soak.py` (see its docstring).", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        r = {"clients": 6, **r, "rejoined": len(r.get("rejoined_nodes") or [])}
        lines.append("| " + " | ".join(str(r.get(c)) for c in cols) + " |")
    lines += ["", "Failures per client (rounds in which it failed, was late or was rejected):", ""]
    lines += [f"- {r['mode']} / {r['engine']}: {r.get('failures_by_client')}" for r in rows]
    (out / "soak.md").write_text("\n".join(lines) + "\n")


def merge(src: Path, out: Path, rounds: int) -> None:
    """Rows of src/soak.json replace the rows of out/soak.json with the same (mode, engine), their run
    folders (without the run lock) are copied into out/cells, and out/soak.md is written again."""
    store = out / "soak.json"
    rows = json.loads(store.read_text()) if store.exists() else []
    for new in json.loads((src / "soak.json").read_text()):
        key = (new["mode"], new["engine"])
        at = [i for i, r in enumerate(rows) if (r["mode"], r["engine"]) == key]
        if at:
            rows[at[0]] = new
        else:
            rows.append(new)
        dst = out / "cells" / f"{key[0]}-{key[1]}"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src / "cells" / f"{key[0]}-{key[1]}", dst, ignore=shutil.ignore_patterns(".lock"))
        print(f"merged {key[0]} / {key[1]}: {new['status']}", flush=True)
    store.write_text(json.dumps(rows, indent=2) + "\n")
    write_md(rows, out, rounds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--modes", default="inprocess,deployment,simulation")
    ap.add_argument("--engines", default="sync,legacy,async")
    ap.add_argument("--clients", type=int, default=M, help="m: clients (SuperNodes), all sampled each round")
    ap.add_argument("--merge", metavar="FROM", help="copy the rows (and run folders) of another --out into --out "
                    "instead of running: soaks run one at a time elsewhere, then collected")
    args = ap.parse_args(argv)
    set_clients(args.clients)
    out = Path(args.out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merge(Path(args.merge).expanduser().resolve(), out, args.rounds)
        return 0
    store = out / "soak.json"
    rows = json.loads(store.read_text()) if store.exists() else []
    done = {(r["mode"], r["engine"]) for r in rows}
    for mode in args.modes.split(","):
        for engine in args.engines.split(","):
            if (mode, engine) in done:
                continue
            t = time.perf_counter()
            shutil.rmtree(out / "cells" / f"{mode}-{engine}", ignore_errors=True)  # an interrupted run starts again
            soak = {"inprocess": soak_inprocess, "deployment": soak_deployment, "simulation": soak_simulation,
                    "simulation-nokill": lambda e, r, o: soak_simulation(e, r, o, kill=False)}[mode]
            run_dir = soak(engine, args.rounds, out)
            rows.append({**row(mode, engine, run_dir), "clients": M, "soak_wall_s": round(time.perf_counter() - t, 1)})
            store.write_text(json.dumps(rows, indent=2) + "\n")
            write_md(rows, out, args.rounds)
            print(json.dumps(rows[-1]), flush=True)
    return 0 if all(r["final_x_finite"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
