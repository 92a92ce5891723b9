"""Beyond one machine: the Ray-backed simulation on an existing multi-node Ray cluster.

A head and a second worker node are started with ``ray start`` on this machine
(``zofl.launch.local_ray_cluster``: each node with its own ports and worker-port range); the SuperLink
starts with ``RAY_ADDRESS`` set, so the simulation's ``ray.init()`` joins the cluster instead of
starting a Ray of its own. The ClientApp actors must run on both nodes (one actor per node's CPU),
and the numbers must be those of the run without Ray. The run is the legacy engine's one run through
Flower (SCAFFOLD, whose client state must follow clients from node to node). Every process started is
stopped by the private FLWR_HOME it carries (``ray stop`` would kill every Ray process on the machine)."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from zofl.inprocess import run_inprocess
from zofl.launch import flwr_run_command, local_ray_cluster, local_superlink, processes_with_env
from zofl.results import read_rounds

pytestmark = pytest.mark.flower
RAY = str(Path(sys.executable).parent / "ray")


def _processes() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, command line)} of every process."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
                out[int(p.name)] = (ppid, (p / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, IndexError, ValueError):
                continue
    return out


@pytest.fixture
def ray_cluster():
    with local_ray_cluster(2, 1) as cluster:  # every process of it stopped by its private FLWR_HOME
        yield cluster.address, cluster.temp_dir
    assert processes_with_env("FLWR_HOME", str(cluster.home)) == []


def test_the_legacy_engine_on_a_two_node_ray_cluster_uses_both_nodes_and_keeps_scaffold_state(ray_cluster, tmp_path,
                                                                                               monkeypatch):
    """The legacy API (flwr.server.strategy.Strategy + start_grid), SCAFFOLD, on natural partitions of a Parquet
    file (a client per site): simulated clients are rebuilt every round, on whichever node's actor is free, so
    each client's c_i must come back from its state; two simulated SuperNodes serve two clients each
    (clients-per-node = 2: a ``legacy.ClientOnNode`` per client, its c_i in a file of its own); the Flower run then
    matches the in-process run of one node per client number for number, and the Message-API engine's too.
    (The legacy engine's one run through Flower: the other engines' are in tests/test_flower_e2e.py.)"""
    from tests.test_partitioning import sites_parquet

    address, temp_dir = ray_cluster
    monkeypatch.setenv("RAY_ADDRESS", address)  # the SuperLink, and the simulation it starts, inherit it
    # the data: natural partitions of a Parquet file of four sites (issue 48: client i holds one site's rows)
    sites_parquet(tmp_path / "sites.parquet", sites=("a", "b", "c", "d"), n=800)
    # client-wait-s: the server asks each SuperNode its partition, which needs the ClientApp actors up; on
    # a loaded 2-core machine two raylets starting 4 actors have taken more than the default 60 s (the
    # run then fails, and `flwr run` still exits 0). The run goes on as soon as they answer.
    cfg = {"strategy": "scaffold", "engine": "legacy", "num-rounds": 3, "num-clients": 4, "beta": 1.0, "tau": 3.0,
           "step-time-s": 0.05, "output-dir": str(tmp_path), "run-name": "cluster", "client-wait-s": 600.0,
           "data-path": str(tmp_path / "sites.parquet"), "client-column": "site", "partitioner": "natural",
           "clients-per-node": 2}
    raylets_with_actors: set[int] = set()
    with local_superlink(tmp_path / "sl") as sl:
        proc = subprocess.Popen(flwr_run_command("zofl", cfg, federation_config="num-supernodes=2 "
                                                 "client-resources-num-cpus=1"),
                                env=sl.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
        reader.start()
        while proc.poll() is None:  # which raylet (Ray node) each ClientApp actor belongs to
            procs = _processes()
            for pid, (ppid, cmd) in procs.items():
                parent = procs.get(ppid, (0, ""))[1]
                # the raylets of this cluster name its temp dir (other Rays on the machine do not count)
                if cmd.startswith("ray::ClientAppActor") and "raylet/raylet" in parent and temp_dir in parent:
                    raylets_with_actors.add(ppid)
            time.sleep(0.2)
        reader.join(10)
    assert proc.returncode == 0, "".join(out)[-4000:]
    assert (tmp_path / "cluster" / "rounds.jsonl").exists(), "".join(out)[-4000:]  # flwr run exits 0 on failure too
    assert len(raylets_with_actors) == 2, raylets_with_actors  # actors on the head and on the worker node
    monkeypatch.delenv("RAY_ADDRESS")
    ref = {**cfg, "step-time-s": 0.0}  # no real sleeps: the numbers are the same (client-wait-s: not a result key)
    d, _ = run_inprocess({**ref, "run-name": "one-node"}, workers=0, share_nodes=False)
    keys = ("test_loss", "sampled", "participants")
    rec = read_rounds(tmp_path / "cluster")
    assert [[r[k] for k in keys] for r in rec] == [[r[k] for k in keys] for r in read_rounds(d)]
    d, _ = run_inprocess({**ref, "engine": "sync", "run-name": "one-node-sync"}, workers=0)
    assert [r["test_loss"] for r in rec] == [r["test_loss"] for r in read_rounds(d)]
