"""The watchdog of zofl.launch: what a process starts dies with it, on SIGKILL too (real processes,
no Flower: the Flower end-to-end check is tests/test_flower_e2e.py's interrupted-run test)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from zofl.launch import _alive, descendants

# A parent that starts its watchdog, then: a child in a session of its own that carries FLWR_HOME
# (as Flower's ServerApp and Ray's daemons do), a grandchild of that child in yet another session
# whose parent then exits (reparented away: only FLWR_HOME finds it), and a plain child without it
# (only the watchdog's snapshot of our descendants finds it). It prints their pids, then waits.
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from zofl.launch import Watchdog
    home = Path(sys.argv[1])
    watch = Watchdog(home)
    env = {**os.environ, "FLWR_HOME": str(home)}
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env, start_new_session=True)
    orphan = subprocess.run([sys.executable, "-c",
                             "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
                             "'import time; time.sleep(300)'], start_new_session=True, stdout=subprocess.DEVNULL, "
                             "stderr=subprocess.DEVNULL); print(p.pid)"],
                            env=env, capture_output=True, text=True).stdout.strip()
    plain = subprocess.Popen(["sleep", "300"])
    print(marked.pid, orphan, plain.pid, flush=True)
    if sys.argv[2] == "done":  # as if it had stopped them itself (it has not: the test sees they live on)
        watch.done()
        print(watch.proc.returncode, flush=True)
    time.sleep(300)
""")


def _start(tmp_path: Path, mode: str):
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "home"), mode], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parent.parent)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3
    return proc, pids


def _wait_gone(pids, timeout: float) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_sigkill_of_the_parent_kills_what_it_started(tmp_path):
    proc, pids = _start(tmp_path, "kill")
    time.sleep(1.5)  # one snapshot of the descendants at least (every WATCH_INTERVAL_S = 1 s)
    watchdogs = [p for p in descendants(proc.pid) if p not in pids]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the watchdog acts within one select interval + SIGTERM's grace; 60 s: a margin for a loaded machine
    assert _wait_gone(pids + watchdogs, 60) == []


def test_a_parent_that_says_done_ends_the_watch_without_killing(tmp_path):
    """``done()``: the parent stopped its processes itself; the watchdog exits at once and kills
    nothing, even when the parent dies right after (these children live on until the test kills them)."""
    proc, pids = _start(tmp_path, "done")
    try:
        assert proc.stdout.readline().strip() == "0"  # the watchdog saw DONE and exited, with code 0
        proc.kill()
        proc.wait()
        time.sleep(3)
        assert all(_alive(p) for p in pids)
    finally:
        for p in pids:
            os.kill(p, signal.SIGKILL)
