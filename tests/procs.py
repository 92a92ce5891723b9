"""Process helpers shared by the tests that kill runs and look for what is left."""
from pathlib import Path


def cmdline(pid: int, limit: int | None = None) -> str:
    """The command line of process ``pid`` (spaces for NULs, cut to ``limit`` characters), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:limit]
    except OSError:
        return ""


def still_alive(started: dict[int, int]) -> list[int]:
    """The pids of ``started`` ({pid: start time}, as ``zofl.launch.descendants`` gives it) still running as the
    same processes (a pid may be reused: its start time tells)."""
    from zofl.launch import start_time

    return [p for p, t in started.items() if start_time(p) == t]


SCOPE = "ZOFL_TEST_SCOPE"  # set by tests/conftest.py, one value per test process, inherited by all it starts


def left_behind() -> list[int]:
    """Processes started from this test process (they inherited its ZOFL_TEST_SCOPE) whose inherited FLWR_HOME
    is a private SuperLink folder that no longer exists: what a finished ``zofl run`` (or the runner) left
    running (its SuperLink, Ray, the ServerApp). The scope keeps a run of another xdist worker, whose
    folder may already be gone while its processes end, out of this test's count."""
    import os

    scope = os.environ[SCOPE].encode()
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = dict(kv.split(b"=", 1) for kv in (entry / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        home = env.get(b"FLWR_HOME", b"").decode()
        if env.get(SCOPE.encode()) == scope and "zofl-superlink-" in home and not Path(home).exists():
            pids.append(int(entry.name))
    return pids


def lock_free(path: Path) -> bool:
    """Whether no process holds the lock file ``path`` (absent: free)."""
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
