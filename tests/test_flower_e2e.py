"""End to end through the real Flower machinery: a SuperLink with the Ray simulation backend,
``flwr run`` submitting this App, ServerApp + ClientApps in Ray actors. No mocks. One run per
engine (sync: ZO-HFL through the user's ``zofl run``, FedRZO; legacy: SCAFFOLD; async: FedBuff), each
compared number for number with the same run-config on the in-process Grid (tests/test_engines.py ties
that to the reference)."""
import json
import subprocess
from pathlib import Path

import pytest

from tests.procs import cmdline
from zofl.inprocess import run_inprocess
from zofl.launch import descendants, local_superlink, start_time
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


def run_both(superlink, cfg: dict, num_supernodes: int) -> tuple[list[dict], list[dict]]:
    """The run's records through Flower (it must succeed) and the same run-config's in-process."""
    res = superlink.run(cfg, num_supernodes=num_supernodes)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    d, _ = run_inprocess({**cfg, "run-name": cfg["run-name"] + "-inprocess"}, workers=0)
    return read_rounds(Path(cfg["output-dir"]) / cfg["run-name"]), read_rounds(d)


def losses(records: list[dict]) -> list[float]:
    return [r["test_loss"] for r in records]


def zofl_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``zofl run ...`` as a user types it (PYTHONPATH: the tests' own task, tests.plugin_task)."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-m", "zofl.cli", "run", *args], env=env, capture_output=True, text=True,
                          timeout=900)


def left_behind() -> list[int]:
    """Processes whose inherited FLWR_HOME is a private SuperLink folder that no longer exists: what a
    finished ``zofl run`` (or the runner) left running (its SuperLink, Ray, the ServerApp)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = dict(kv.split(b"=", 1) for kv in (entry / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        home = env.get(b"FLWR_HOME", b"").decode()
        if "zofl-superlink-" in home and not Path(home).exists():
            pids.append(int(entry.name))
    return pids


def test_zofl_run_through_flower_matches_in_process_and_leaves_nothing(tmp_path):
    """The user's command: Flower simulation on a private SuperLink, ZO-HFL on the Message API,
    progress, the summary printed last, exit 0, no process left; the same numbers in-process."""
    cfg = {"num-rounds": 3, "num-clients": 5, "beta": 0.6, "tau": 5.0, "uplink": "vectors", "straggler-prob": 0.2,
           "output-dir": str(tmp_path), "run-name": "flower"}
    res = zofl_run(tmp_path, "--rounds", "3", "--clients", "5", "--set", "beta=0.6", "tau=5.0", 'uplink="vectors"',
                   "straggler-prob=0.2", f'output-dir="{tmp_path}"', 'run-name="flower"')
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    assert lines[-5].startswith("ZO-HFL on digits: 3 rounds") and lines[-1].strip() == f"results: {tmp_path / 'flower'}"
    assert lines[-2].strip().startswith("clients: 9 sampled, 9 replies used, 0 dropped")
    assert "3/3 rounds" in res.stdout and "WARNING" not in res.stdout  # progress; Flower's noise is in flwr.log
    assert (tmp_path / "flower" / "flwr.log").stat().st_size > 0
    assert not left_behind()
    rec = read_rounds(tmp_path / "flower")
    assert [r["round"] for r in rec] == [0, 1, 2, 3]
    assert all(r["participants"] == 3 and r["uplink_bytes"] > 0 for r in rec[1:])
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert summary["final_test_acc"] == rec[-1]["test_acc"]
    # the same seed in-process (no Ray, no SuperLink) gives the same numbers
    d, _ = run_inprocess({**cfg, "run-name": "inprocess"}, workers=0)
    ref = read_rounds(d)
    for a, b in zip(rec, ref):
        assert (a["test_loss"], a["f2_est"], a["sampled"]) == (b["test_loss"], b["f2_est"], b["sampled"])


def test_zofl_run_exit_codes(tmp_path):
    """A bad key: one line naming it, exit 2, before anything starts. A run that fails inside Flower,
    or that the failure policy stops: exit 1 with the error, where plain ``flwr run`` exits 0;
    nothing left running."""
    import time

    t = time.monotonic()
    bad = zofl_run(tmp_path, "--set", "alpha=0")
    assert bad.returncode == 2 and time.monotonic() - t < 20  # (the suite's load; alone it takes < 1 s)
    assert bad.stderr.strip().splitlines() == ["zofl run: error: run-config key 'alpha' must be a number > 0, got 0.0"]
    res = zofl_run(tmp_path, "--rounds", "2", "--clients", "3", "--quiet", "--set",
                   'task="tests.plugin_task:FailingTask"', f'output-dir="{tmp_path}"', 'run-name="fails"')
    assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
    assert "the run failed" in res.stderr and "deliberate failure" in res.stderr
    # no client ever answers: the failure policy stops the run, exit 1, its summary says why
    res = zofl_run(tmp_path, "--rounds", "2", "--clients", "2", "--quiet", "--set", "crash-prob=1.0",
                   f'output-dir="{tmp_path}"', 'run-name="dead"')
    assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
    assert "FAILED: the failure policy stopped the run: 2 rounds had fewer than min-replies" in res.stdout
    assert "clients with failures (rounds): " in res.stdout
    assert not left_behind()


def test_legacy_engine_keeps_scaffold_state_across_flower_rounds(superlink, tmp_path):
    # The legacy API (flwr.server.strategy.Strategy + start_grid). Simulated clients are rebuilt
    # every round; SCAFFOLD's c_i must come back from context.state, so the Flower run matches the
    # in-process run number for number, and the Message-API engine too.
    cfg = {"strategy": "scaffold", "engine": "legacy", "num-rounds": 3, "num-clients": 4, "beta": 1.0, "tau": 3.0,
           "output-dir": str(tmp_path), "run-name": "scaffold"}
    rec, ref = run_both(superlink, cfg, 4)
    assert losses(rec) == losses(ref)
    d, _ = run_inprocess({**cfg, "engine": "sync", "run-name": "scaffold-sync"}, workers=0)
    assert losses(rec) == losses(read_rounds(d))


HYPERCLEANING = {"task": "hyper-cleaning", "num-clients": 4, "server-fraction": 0.0, "local-steps": 5,
                 "lower-lr": 0.5, "inner-lr": 1.0, "inner-rounds": 3, "outer-lr": 10.0, "neumann-steps": "3,5",
                 "lipschitz-g": 20.0}


def test_afbo_on_the_async_engine_under_the_simulated_clock_matches_in_process(superlink, tmp_path):
    cfg = {**HYPERCLEANING, "strategy": "afbo", "engine": "async", "num-rounds": 8, "speed-profile": "uniform",
           "speed-param": 0.2, "availability": "1,0.6", "output-dir": str(tmp_path), "run-name": "afbo"}
    rec, ref = run_both(superlink, cfg, 4)
    keys = ("test_loss", "clients", "staleness", "clock_s", "outer_delay_mean")
    assert [[r.get(k) for k in keys] for r in rec] == [[r.get(k) for k in keys] for r in ref]
    assert {r.get("step") for r in rec[1:]} == {"inner", "outer"}


def test_fednest_on_the_sync_engine_matches_in_process(superlink, tmp_path):
    cfg = {**HYPERCLEANING, "strategy": "fednest", "num-rounds": 1, "beta": 0.5, "output-dir": str(tmp_path),
           "run-name": "fednest"}
    rec, ref = run_both(superlink, cfg, 4)
    assert losses(rec) == losses(ref) and len(rec) == 1 + (3 + 3 + 1)  # FedNest takes N = the first N_i


def test_async_engine_on_the_wall_clock_does_not_wait_for_a_slow_device(superlink, tmp_path):
    # Client 0's device is 20x slower: its task (4 local steps of 0.05 s at speed 0.05) takes 4 s of
    # real sleep in its Ray actor, a fast client's about 0.2 s. With K = 1 the fast clients' updates
    # are applied while it works (about 10 in those 4 s on an idle machine; 3 are asked for), and
    # its own comes late, with the staleness it has.
    cfg = {"strategy": "fedbuff", "engine": "async", "clock": "wall", "buffer-size": 1, "num-rounds": 40,
           "num-clients": 3, "local-steps": 2, "speed-profile": "slow", "slow-clients": "0", "speed-param": 0.05,
           "step-time-s": 0.05, "output-dir": str(tmp_path), "run-name": "wall"}
    res = superlink.run(cfg, num_supernodes=3)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    rec = read_rounds(tmp_path / "wall")[1:]
    slow = [i for i, r in enumerate(rec) if 0 in r["clients"]]
    assert slow and slow[0] >= 3, [r["clients"] for r in rec]
    assert rec[slow[0]]["staleness"] == [slow[0]]  # computed on version 0, applied after slow[0] updates


def test_bad_config_fails_before_round_one_with_a_clear_message(superlink, tmp_path):
    res = superlink.run({"alpha": 0.0, "output-dir": str(tmp_path)}, num_supernodes=2, timeout=300)
    out = res.stdout + res.stderr
    assert "run-config key 'alpha' must be a number > 0, got 0.0" in out, out[-3000:]
    assert "[ROUND 1]" not in out
    assert not any(tmp_path.iterdir())  # nothing written


def test_too_few_supernodes_is_explained_at_once(superlink, tmp_path):
    """Flower's default federation (2 SuperNodes) and the default num-clients (10): the ServerApp
    says so as soon as the nodes answer, not after client-wait-s (60 s), with the one-line fix."""
    res = superlink.run({"output-dir": str(tmp_path)}, num_supernodes=2, timeout=300)
    out = res.stdout + res.stderr
    fix = "The run cannot go on: run-config num-clients=10 but the federation has 2 SuperNodes"
    assert fix in out and 'num-supernodes=10' in out, out[-3000:]
    assert "Traceback" not in out[:out.index(fix)]  # the one-line fix comes before Flower's traceback


def _lock_free(path: Path) -> bool:
    import fcntl
    import os

    if not path.exists():
        return True
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_zofl_run_killed_three_ways_leaves_nothing_and_resumes_exactly(tmp_path):
    """``zofl run`` stopped at random rounds by SIGKILL (nothing of it runs: its watchdog stops the rest),
    SIGTERM (within 5 s on an idle machine) and Ctrl-C (``flwr stop`` first, exit 130), each resumed:
    after each, no process of the run is left, no lock is held and there is no summary; the last resume
    ends with the numbers of an uninterrupted run."""
    import os
    import random
    import signal
    import sys
    import time

    seed = random.randrange(10**6)
    rng = random.Random(seed)
    keys = ["beta=0.5", "tau=2.0", "step-time-s=0.05", "checkpoint-every=3", f'output-dir="{tmp_path}"',
            'run-name="c"']
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    folder = tmp_path / "c"
    rounds = folder / "rounds.jsonl"
    args = ["--rounds", "30", "--clients", "4", "--quiet", "--set", *keys, "resume=true"]  # (a fresh start at first)

    def last_round() -> int:
        return read_rounds(folder)[-1]["round"] if rounds.exists() and read_rounds(folder) else -1

    for how in ("SIGKILL", "SIGTERM", "SIGINT"):
        target = max(last_round(), 0) + rng.randint(2, 5)  # a random round past the last recorded one
        # SIGINT at its default in the child whatever the test runner inherited: a background job of a
        # non-interactive shell starts with SIGINT ignored, and Python then raises no KeyboardInterrupt
        proc = subprocess.Popen([sys.executable, "-m", "zofl.cli", "run", *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        end = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < end and last_round() < target:
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before round {target} (seed {seed}): {proc.communicate()}"
        started = descendants(proc.pid)  # {pid: start time}  # what zofl run started (Ray's agents too)
        t0 = time.monotonic()
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
        else:
            os.kill(proc.pid, getattr(signal, how))  # `kill` / `kill -9` of zofl run alone
        out, err = proc.communicate(timeout=180)
        took = time.monotonic() - t0
        expected = {"SIGKILL": -signal.SIGKILL, "SIGTERM": 128 + signal.SIGTERM, "SIGINT": 130}[how]
        assert proc.returncode == expected, (how, seed, (out + err)[-3000:])
        if how == "SIGTERM":
            assert took < 15, f"SIGTERM took {took:.1f} s (5 s on an idle machine; the margin is for load)"
        if how == "SIGINT":
            assert "the run was stopped (flwr stop)" in err, err[-3000:]
        def alive():
            return [p for p, t in started.items() if start_time(p) == t]

        end = time.monotonic() + 60  # SIGKILL: the watchdog's turn (one second's poll + SIGTERM's grace)
        while (left_behind() or alive() or not _lock_free(folder / ".lock")) and time.monotonic() < end:
            time.sleep(0.5)
        assert not left_behind(), (how, seed)
        assert not alive(), (how, seed, {p: cmdline(p, 200) for p in alive()})
        assert _lock_free(folder / ".lock") and _lock_free(folder / ".cli.lock"), (how, seed)
        assert not (folder / "summary.json").exists() and last_round() < 30, (how, seed)
    res = zofl_run(tmp_path, *args)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    cfg = {"num-rounds": 30, "num-clients": 4, "beta": 0.5, "tau": 2.0, "output-dir": str(tmp_path), "run-name": "ref"}
    d, _ = run_inprocess(cfg, workers=0)
    assert losses(read_rounds(folder)) == losses(read_rounds(d))


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
