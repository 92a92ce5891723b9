"""Benchmark: how long Flower's Ray simulation takes to run its first ClientApp, for a bare Flower App and for
zofl's ClientApp: the floor under the node map's "to the first answer" (docs/benchmark-scale.md).

    python benchmarks/bench_first_answer.py [--nodes 100] [--repeats 3] [--out FILE.json]

Each run starts a private SuperLink (``zofl.launch.local_superlink``, as ``zofl run`` does) and ``flwr run``s a
tiny App written to a temporary folder: its ServerApp does nothing but wait for ``--nodes`` SuperNodes and send
each the query zofl's node map sends (``query.partition``); its ClientApp is either a bare Flower ClientApp that
answers with its partition-id (``bare``: what any Flower App pays) or zofl's own (``zofl.client_app:app``). The
runs alternate bare, zofl, bare, ... so that a drifting machine load falls on both. For each it records, from the
SuperLink's start: when the ServerApp started (``server_s``), when the first answer was made on its node
(``first_answer_s``; replies carry their node's creation time, the same clock) and the last (``last_answer_s``).
A zofl run's node map waits from its ServerApp's set-up end to that first answer; neither App here has a set-up.
``--out`` writes the figures as JSON; ``--from FILE`` prints the table of a saved file.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from zofl.launch import local_superlink
from zofl.stats import fmt_interval, paired

T0_ENV = "ZOFL_BENCH_T0"  # time.time() when the SuperLink was started, inherited by the simulation process

APP = '''
import json, os, time

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@client.query("partition")
def partition(msg: Message, context: Context) -> Message:
    pid = int(context.node_config.get("partition-id", 0))
    return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid})}), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    t0, start = float(os.environ["%(env)s"]), time.time()
    n = int(context.run_config["nodes"])
    while len(ids := sorted(grid.get_node_ids())) < n:
        time.sleep(0.05)
    msgs = [Message(RecordDict(), dst_node_id=i, message_type="query.partition") for i in ids]
    replies = list(grid.send_and_receive(msgs, timeout=600))
    made = [r.metadata.created_at for r in replies if not r.has_error()]
    out = {"server_s": start - t0, "first_answer_s": min(made) - t0, "last_answer_s": max(made) - t0,
           "answers": len(made), "errors": sum(r.has_error() for r in replies)}
    with open(context.run_config["out"], "w") as f:
        json.dump(out, f)
''' % {"env": T0_ENV}

PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "firstanswer"
version = "1.0.0"

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "zofl"

[tool.flwr.app.components]
serverapp = "firstanswer:server"
clientapp = "%s"

[tool.flwr.app.config]
nodes = 1
out = ""
"""

CLIENTAPPS = {"bare": "firstanswer:client", "zofl": "zofl.client_app:app"}


def write_app(folder: Path, which: str) -> Path:
    """The tiny App with the ``which`` ClientApp, in ``folder``."""
    folder.mkdir(parents=True)
    (folder / "firstanswer.py").write_text(APP)
    (folder / "pyproject.toml").write_text(PYPROJECT % CLIENTAPPS[which])
    return folder


def run_once(tmp: Path, which: str, nodes: int, i: int) -> dict:
    app, out = write_app(tmp / f"{which}-{i}", which), tmp / f"{which}-{i}.json"
    t0 = time.time()
    with local_superlink(tmp / f"sl-{which}-{i}", extra_env={T0_ENV: f"{t0:.6f}"}) as sl:
        res = sl.run({"nodes": nodes, "out": str(out)}, num_supernodes=nodes, app_dir=app, timeout=900)
    if res.returncode != 0 or not out.exists():
        sys.exit(f"{which} run {i} failed:\n" + (res.stdout + res.stderr)[-4000:])
    return {"app": which, "repeat": i, "nodes": nodes, **json.loads(out.read_text()), "whole_s": time.time() - t0}


def table(rows: list[dict]) -> str:
    out = ["| ClientApp | SuperNodes | runs | ServerApp started (s) | first answer (s) | last answer (s) | "
           "first answer after the ServerApp's start (s) |", "|---|---|---|---|---|---|---|"]

    def med(rs, key):
        values = [r[key] for r in rs]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    for which in CLIENTAPPS:
        rs = [r for r in rows if r["app"] == which]
        if not rs:
            continue
        waits = [{"w": r["first_answer_s"] - r["server_s"]} for r in rs]
        out.append(f"| {which} | {rs[0]['nodes']} | {len(rs)} | {med(rs, 'server_s')} | {med(rs, 'first_answer_s')} | "
                   f"{med(rs, 'last_answer_s')} | {med(waits, 'w')} |")
    wait = {which: {r["repeat"]: r["first_answer_s"] - r["server_s"] for r in rows if r["app"] == which}
            for which in CLIENTAPPS}
    first = {which: {r["repeat"]: r["first_answer_s"] for r in rows if r["app"] == which} for which in CLIENTAPPS}
    out += ["", "zofl's ClientApp minus the bare one, paired by repeat (mean +- 95% t interval): first answer "
            f"{fmt_interval(paired(first['zofl'], first['bare']))} s; first answer after the ServerApp's start "
            f"{fmt_interval(paired(wait['zofl'], wait['bare']))} s"]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", type=Path, help="print the table of a saved --out file and stop")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    if args.source:
        print(table(json.loads(args.source.read_text())["rows"]))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="zofl-first-") as tmp:
        for i in range(args.repeats):
            for which in CLIENTAPPS:
                rows.append(run_once(Path(tmp), which, args.nodes, i))
                print(json.dumps(rows[-1]), flush=True)
    print(f"{args.nodes} SuperNodes, {args.repeats} runs each; median (min-max), seconds from the SuperLink's start")
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv[1:]), "cpus": os.cpu_count(), "rows": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
