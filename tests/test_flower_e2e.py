"""End to end through the real Flower machinery: a SuperLink with the Ray simulation backend,
``flwr run`` submitting this App, ServerApp + ClientApps in Ray actors. No mocks. One run per
engine (sync: ZO-HFL through the user's ``zofl run``, killed (SIGKILL, Ctrl-C) and resumed; async: AFBO under
the simulated clock; legacy: SCAFFOLD, on a two-node Ray cluster in tests/test_ray_cluster.py), each
compared number for number with the same run-config on the in-process Grid (tests/test_engines.py ties
that to the reference); the torch example of docs/usage.md. Plain ``flwr run``'s two early failures (a bad
run-config value, too few SuperNodes) are the ServerApp's own checks: they are shown on a deployment's
SuperNodes in tests/test_deploy.py, with no Ray to start.
What needs no Ray is tested on the in-process Grid (the same ServerApp code): the asynchronous engine on
the wall clock and FedNest's rounds in tests/test_async_records.py, ``zofl run``'s exit codes in
tests/test_cli.py."""
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.procs import cmdline, left_behind, lock_free, still_alive
from zofl.core.checkpoint import load_checkpoint
from zofl.inprocess import run_inprocess
from zofl.launch import descendants, local_superlink
from zofl.results import read_rounds

pytestmark = pytest.mark.flower


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    work = tmp_path_factory.mktemp("superlink")
    with local_superlink(work) as sl:
        yield sl
    assert sl.proc.poll() is not None  # stopped
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"


def run_both(superlink, cfg: dict, num_supernodes: int) -> tuple[list[dict], list[dict], str]:
    """The run's records through Flower (it must succeed), the same run-config's in-process, and Flower's output.
    Without a run-name the Flower run must land in its default folder (``assert_in_default_folder``)."""
    from .test_wire_and_names import assert_in_default_folder

    t0 = time.time()
    res = superlink.run(cfg, num_supernodes=num_supernodes)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    out = Path(cfg["output-dir"])
    folder = out / cfg["run-name"] if "run-name" in cfg else assert_in_default_folder(out, cfg["strategy"], t0,
                                                                                      time.time())
    # the reference: one node per client (a Flower run whose SuperNodes serve several must give its numbers)
    d, _ = run_inprocess({**cfg, "run-name": folder.name + "-inprocess"}, workers=0, share_nodes=False)
    return read_rounds(folder), read_rounds(d), res.stdout + res.stderr


def bench_engines():
    """benchmarks/bench_engines.py as a module (its main() is not run)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_engines.py"
    spec = importlib.util.spec_from_file_location("bench_engines", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def losses(records: list[dict]) -> list[float]:
    return [r["test_loss"] for r in records]


def zofl_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``zofl run ...`` as a user types it (PYTHONPATH: the tests' own task, tests.plugin_task)."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-m", "zofl.cli", "run", *args], env=env, capture_output=True, text=True,
                          timeout=900)


HYPERCLEANING = {"task": "hyper-cleaning", "num-clients": 4, "server-fraction": 0.0, "local-steps": 5,
                 "lower-lr": 0.5, "inner-lr": 1.0, "inner-rounds": 3, "outer-lr": 10.0, "neumann-steps": "3,5",
                 "lipschitz-g": 20.0}


def test_afbo_on_the_async_engine_under_the_simulated_clock_matches_in_process(superlink, tmp_path):
    """Also a plain ``flwr run`` without run-name (the App's default, "", as a user who does not go through ``zofl
    run``, which names every run itself): the server names the run <strategy>-<dataset>-<start time> and writes into
    that folder of output-dir, never into output-dir itself (issue 52). Two SuperNodes serve the four clients
    (clients-per-node = 2, issue 51): the numbers of one node per client, bit for bit."""
    cfg = {**HYPERCLEANING, "strategy": "afbo", "engine": "async", "num-rounds": 8, "speed-profile": "uniform",
           "speed-param": 0.2, "availability": "1,0.6", "output-dir": str(tmp_path / "out"), "clients-per-node": 2}
    rec, ref, out = run_both(superlink, cfg, 2)
    keys = ("test_loss", "clients", "staleness", "clock_s", "outer_delay_mean")
    assert [[r.get(k) for k in keys] for r in rec] == [[r.get(k) for k in keys] for r in ref]
    assert {r.get("step") for r in rec[1:]} == {"inner", "outer"}
    # what benchmarks/bench_engines.py reads of a run through Ray (its Ray part is not run in the tests: it costs
    # two more Ray starts, and its in-process part, test_benchmarks, runs the rest of its code): the lines that
    # mark the phases of a run (less the two its timing hook or Flower's own strategies print)
    marks = {k: v for k, v in bench_engines().PHASES.items() if k not in ("partitions_learned", "strategy_finished")}
    assert [k for k, marker in marks.items() if marker not in out] == [], out[-3000:]


def test_zofl_run_killed_then_resumed_through_flower_gives_the_in_process_numbers(tmp_path):
    """The user's command, ZO-HFL on the Message-API engine through a private SuperLink with Ray, stopped at
    random rounds two ways, each resumed: SIGKILL of ``zofl run`` and of Flower's simulation process (the
    ServerApp's) at once (nothing of ours runs: its watchdog stops the rest), and Ctrl-C (``flwr stop``
    first, exit 130). After each, no process of the run is left, no lock is held and there is no summary.
    The last resume, as a user sees it: progress, the summary printed last (with this run's own start-up), exit
    0, nothing left; every round once, and the numbers (records and final model) of the uninterrupted run made
    in-process (no Ray, no SuperLink, one node per client: the Flower run's two SuperNodes serve two clients
    each). SIGTERM (``kill``) goes through the same ``finally`` as Ctrl-C without ``flwr stop``: tested without
    Ray in test_cli.py (``test_sigterm_of_zofl_run_...``), a Ray start less here."""
    import os
    import random
    import signal
    import sys
    import time

    import numpy as np

    seed = random.randrange(10**6)
    rng = random.Random(seed)
    # two kills at most 5 rounds apart each (the second by round 10), then at least 10 rounds of about 1 s:
    # Ctrl-C's `flwr stop` must land before the run ends on its own (12 rounds of 0.3 s did not, once)
    rounds_total = 20
    # two SuperNodes serve the four clients (clients-per-node, issue 51; zofl run sizes the federation): the
    # reference below has one node per client
    keys = ["beta=0.5", "tau=2.0", 'uplink="vectors"', "straggler-prob=0.2", "step-time-s=0.05",
            "checkpoint-every=3", f'output-dir="{tmp_path}"', 'run-name="c"', "clients-per-node=2"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    folder = tmp_path / "c"
    rounds = folder / "rounds.jsonl"
    args = ["--rounds", str(rounds_total), "--clients", "4", "--set", *keys, "resume=true"]  # (a fresh start at first)

    def last_round() -> int:
        return read_rounds(folder)[-1]["round"] if rounds.exists() and read_rounds(folder) else -1

    for how in ("SIGKILL", "SIGINT"):
        target = max(last_round(), 0) + rng.randint(2, 5)  # a random round past the last recorded one
        # SIGINT at its default in the child whatever the test runner inherited: a background job of a
        # non-interactive shell starts with SIGINT ignored, and Python then raises no KeyboardInterrupt
        proc = subprocess.Popen([sys.executable, "-m", "zofl.cli", "run", "--quiet", *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        end = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < end and last_round() < target:
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before round {target} (seed {seed}): {proc.communicate()}"
        started = descendants(proc.pid)  # {pid: start time}  # what zofl run started (Ray's agents too)
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
        elif how == "SIGKILL":
            # the ServerApp runs in Flower's `flwr-simulation` process (with Ray): it dies mid-round, at once
            sims = [p for p in started if "flwr-simulation" in cmdline(p)]
            assert len(sims) == 1, (seed, {p: cmdline(p, 200) for p in started})
            os.kill(sims[0], signal.SIGKILL)
            os.kill(proc.pid, signal.SIGKILL)  # `kill -9` of zofl run
        out, err = proc.communicate(timeout=180)
        expected = {"SIGKILL": -signal.SIGKILL, "SIGINT": 130}[how]
        assert proc.returncode == expected, (how, seed, (out + err)[-3000:])
        if how == "SIGINT":
            assert "the run was stopped (flwr stop)" in err, err[-3000:]

        end = time.monotonic() + 60  # SIGKILL: the watchdog's turn (one second's poll + SIGTERM's grace)
        while (left_behind() or still_alive(started) or not lock_free(folder / ".lock")) and time.monotonic() < end:
            time.sleep(0.5)
        assert not left_behind(), (how, seed)
        assert not still_alive(started), (how, seed, {p: cmdline(p, 200) for p in still_alive(started)})
        assert lock_free(folder / ".lock") and lock_free(folder / ".cli.lock"), (how, seed)
        assert not (folder / "summary.json").exists() and last_round() < rounds_total, (how, seed)
    ck = load_checkpoint(folder)
    first = (ck[0] if ck is not None else 0) + 1  # the first round the last resume runs
    t0 = time.monotonic()
    res = zofl_run(tmp_path, *args)
    took = time.monotonic() - t0
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    rec = read_rounds(folder)
    assert [r["round"] for r in rec] == list(range(rounds_total + 1))  # nothing lost, nothing twice
    assert all(r["participants"] == 2 and r["uplink_bytes"] > 0 for r in rec[1:])
    sampled = sum(len(r["sampled"]) for r in rec)
    title = next(i for i, line in enumerate(lines) if line.startswith("ZO-HFL on digits: "))
    assert lines[title].startswith(f"ZO-HFL on digits: {rounds_total} rounds"), lines[title:]
    assert lines[-1].strip() == f"results: {folder}" and all(line.startswith("  ") for line in lines[title + 1:])
    assert any(line.strip().startswith(f"clients: {sampled} sampled, {sampled} replies used, 0 dropped")
               for line in lines[title:]), lines[title:]
    assert f"{rounds_total}/{rounds_total} rounds" in res.stdout and "WARNING" not in res.stdout  # progress
    assert (folder / "flwr.log").stat().st_size > 0  # Flower's noise is in flwr.log
    assert not left_behind()
    assert not (folder / ".lock").exists() and not (folder / ".cli.lock").exists()  # a finished run's: removed
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final_test_acc"] == rec[-1]["test_acc"]
    assert_own_start_up(summary["startup"], first, took, lines[title:])
    with np.load(folder / "checkpoint.npz") as ck:
        assert int(ck["round"]) == rounds_total
        x = ck["x"]
    cfg = {"num-rounds": rounds_total, "num-clients": 4, "beta": 0.5, "tau": 2.0, "uplink": "vectors",
           "straggler-prob": 0.2, "output-dir": str(tmp_path), "run-name": "ref"}
    d, x_ref = run_inprocess(cfg, workers=0)  # the same seed in-process, uninterrupted, no real sleeps, a node each
    np.testing.assert_array_equal(x, x_ref)
    for a, b in zip(rec, read_rounds(d), strict=True):
        assert (a["test_loss"], a["f2_est"], a["sampled"]) == (b["test_loss"], b["f2_est"], b["sampled"])


def assert_own_start_up(s: dict, first: int, took: float, lines: list[str]) -> None:
    """summary.json's ``startup`` of a resume through ``zofl run`` (issue 51, item 5): this run's, every part known
    (the runtime's start too: ``zofl run`` told the ServerApp when it started the SuperLink), each >= 0, together
    within the command's time; its first round the one after the checkpoint; and the summary printed says it."""
    parts = [s[k] for k in ("runtime_s", "setup_s", "node_map_s", "first_round_s")]
    assert all(isinstance(v, float) and v >= 0 for v in parts) and s["runtime_s"] > 0, s
    assert s["first_round"] == first and sum(parts) <= took, (s, first, took)
    assert 0 <= s["first_answer_s"] <= s["node_map_s"], s  # the wait for the first node's answer is the map's
    line = (f"start-up: runtime {s['runtime_s']:.1f} s, server set-up {s['setup_s']:.1f} s, node map "
            f"{s['node_map_s']:.1f} s (first answer after {s['first_answer_s']:.1f} s), round {first} "
            f"{s['first_round_s']:.1f} s")
    assert line in [x.strip() for x in lines], (line, lines)


def test_the_torch_example_runs_from_the_models_folder_as_documented(tmp_path):
    """docs/usage.md's "Bring your own torch model" as a user runs it: its code in mymodels.py in the current
    folder, its command typed there (the `zofl` console script, no PYTHONPATH), shortened to 2 rounds of 3
    clients: the server's check and every client (Ray's workers, in other folders) import the module."""
    import os
    import re
    import shlex
    import sys

    doc = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    code = re.search(r"## Bring your own torch model.*?```python\n(.*?)\n```", doc, re.S).group(1)
    command = re.search(r"then `(zofl run [^`]*)`", doc).group(1)
    (tmp_path / "mymodels.py").write_text(code)
    args = [*shlex.split(command)[2:], "--rounds", "2", "--clients", "3", "--quiet", "--out", "runs", "--set",
            "run-name=byo", "beta=1.0"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([str(Path(sys.executable).parent / "zofl"), "run", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    rec = read_rounds(tmp_path / "runs" / "byo")
    assert [r["participants"] for r in rec] == [0, 3, 3] and rec[-1]["test_acc"] > rec[0]["test_acc"]
    assert json.loads((tmp_path / "runs" / "byo" / "config.json").read_text())["task"] == "mymodels:TASK"
    assert not left_behind()
