"""Start a Flower SuperLink of our own and submit runs to it with ``flwr run`` (used by ``zofl run``,
the runner, tests, benchmarks and scripts; users can just call ``flwr run``).

``flwr run`` on its own starts a background SuperLink that never stops and, by default,
reinstalls the App's dependencies with uv for every run (gigabytes with torch). Here we start
``flower-superlink --simulation --disable-runtime-dependency-installation`` on a free port,
declare it in a temporary FLWR_HOME, run, and stop every process we started, including those
that left the SuperLink's process group (Ray's daemons, Flower's ServerApp process): they are found
by the private FLWR_HOME they inherited.

Every process dies with the one that started it, however that one ends:
* a normal end, an exception, Ctrl-C, SIGTERM or SIGHUP: the ``finally`` of ``local_superlink``
  stops them all at once (SIGTERM, a grace of ``STOP_GRACE_S``, then SIGKILL), so SIGTERM of
  ``zofl run`` ends everything within about 5 s;
* SIGKILL (nothing of ours runs): a watchdog process (``watchdog``), started first in a session
  of its own, holds the read end of a pipe whose only write end is ours. The kernel closes that
  end when we die, however we die; the watchdog then sees end-of-file and kills what we started:
  the processes that carry our private FLWR_HOME and every descendant of ours it saw while we
  lived (a snapshot each second, checked against each process's start time, so a reused pid is
  never hit). A parent-death signal (PR_SET_PDEATHSIG) alone is not enough: it reaches only our
  direct children, and Flower's ServerApp and Ray's daemons are grandchildren in other sessions.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

QUIET_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
# Ray's defaults that a shared machine breaks, set unless the user set them (docs/testing.md, "Under load"):
# - Ray starts its workers (the ClientApp actors: every client's work) at nice 15, below everything else on the
#   machine: beside 10 busy processes at nice 0 a worker got about 3% of what each of those got, and a 3-round run
#   on a two-node Ray cluster did not finish its first round in 6 minutes. At 0 they take their fair share;
# - a worker that has not registered with its raylet 60 s after it started is killed and started again, and at
#   load 12 on 2 cores a worker's imports (ray, flwr, numpy, the task) take longer than that.
RAY_ENV_DEFAULTS = {"RAY_worker_niceness": "0", "RAY_worker_register_timeout_seconds": "600"}
PROJECT_DIR = Path(__file__).resolve().parent.parent
STOP_GRACE_S = 2.5  # between SIGTERM and SIGKILL when we stop our processes (SIGTERM must end a run within 5 s)
WATCH_INTERVAL_S = 1.0  # how often the watchdog notes our descendants
DONE = b"done"  # what we write to the watchdog when we stopped our processes ourselves


def _bin(name: str) -> str:
    """A console script of this Python environment (falls back to PATH)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def die_with_parent(parent: int | None = None) -> None:
    """``preexec_fn`` of the processes we start, and ``initializer`` of our worker pools (Linux): the
    child gets SIGKILL when the thread that started it ends, even if this process is SIGKILLed and no
    ``finally`` runs (prctl PR_SET_PDEATHSIG). Their own children (Flower's ServerApp and SuperExec
    processes) watch their parent with ``--parent-pid``. Elsewhere a no-op. With ``parent`` (the
    starter's pid), a child whose starter died while it was still starting ends at once."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:
        os._exit(1)


@contextlib.contextmanager
def exit_on_terminate() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP (``kill``, ``timeout``, a closed terminal) raise
    SystemExit, so the ``finally`` clauses that stop our processes run (Python's default for them is
    to die on the spot). Only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        for sig in old:  # a second signal must not cut our cleanup short (SIGKILL still ends it: the watchdog acts)
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before port {port} opened")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the process group of ``proc`` (it was started in a new session), then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (Ray workers, serverapp)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def processes_with_env(key: str, value: str) -> list[int]:
    """PIDs of this user's processes whose environment has ``key=value`` (Linux /proc; [] elsewhere)."""
    needle = f"{key}={value}".encode()
    me, pids = os.getpid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int(entry.name) != me and needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def kill_descendants_by_env(key: str, value: str, timeout: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM, then SIGKILL after ``timeout`` s, every process that inherited ``key=value``: what a
    SuperLink started, even in other sessions (Flower's ServerApp process, Ray's daemons and actors),
    which killing its process group misses. Returns the PIDs found."""
    pids = processes_with_env(key, value)
    terminate(pids, timeout)
    return pids


def terminate(pids: list[int], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every pid, wait up to ``grace`` s for them to end, SIGKILL what is left, wait up to 2 s."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        if not any(_alive(p) for p in pids):
            return


def _stat(pid: int | str) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) of a process, from /proc (None if it is gone)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int | str) -> int | None:
    """A live process's start time in clock ticks: with its pid, what names it (a pid may be reused);
    None once it is gone or a zombie (dead, waiting to be reaped: its descriptors and locks are gone)."""
    st = _stat(pid)
    return None if st is None or st[0] == "Z" else st[2]


def descendants(root: int) -> dict[int, int]:
    """{pid: start time} of every live descendant of ``root`` (Linux /proc; {} elsewhere)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        st = _stat(entry.name)
        if st is not None:
            children.setdefault(st[1], []).append((int(entry.name), st[2]))
    out, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def watchdog(parent: int, home: str, remove: str | None) -> None:
    """The watchdog's loop (``python -m zofl.launch watchdog``; see the module docstring): note
    ``parent``'s descendants each second until stdin brings ``DONE`` (the parent stopped its
    processes itself: nothing to do) or reaches end-of-file without it (the parent died): then kill
    the descendants it noted that are still alive (same pid and start time) and every process with
    FLWR_HOME = ``home``, and delete the folder ``remove`` (the temporary one ``local_superlink``
    made), if any."""
    import select

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the end of the pipe ends the watch
    me, seen = os.getpid(), {}
    while True:
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], WATCH_INTERVAL_S)
        if ready:
            data = os.read(sys.stdin.fileno(), 4096)
            if DONE in data:
                return  # the parent stopped its processes itself
            if not data:
                break  # end-of-file without DONE: the parent died
        seen.update(descendants(parent))
        seen = {p: t for p, t in seen.items() if p != me and start_time(p) is not None}
    ours = [p for p, t in seen.items() if p != me and start_time(p) == t]
    terminate(sorted(set(ours) | set(processes_with_env("FLWR_HOME", home)) - {me}))
    if remove:
        shutil.rmtree(remove, ignore_errors=True)


_WATCH_ENDS: set[int] = set()  # write ends of our watchdogs' pipes (closed in a forked child: see below)


def _close_watch_ends_in_child() -> None:
    """A forked child (e.g. a worker of a process pool) must not hold a watchdog's pipe open, or the
    watchdog would never see its parent die; exec'd children never get it (the fds are non-inheritable)."""
    for fd in _WATCH_ENDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _WATCH_ENDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_watch_ends_in_child)


class Watchdog:
    """This process's watchdog (see the module docstring): ``done()`` once our processes are stopped
    (it exits doing nothing); ``close()`` without ``done()`` lets it act as if we had died."""

    def __init__(self, home: Path, remove: Path | None = None):
        read_end, self.fd = os.pipe()  # both non-inheritable: no exec'd child of ours gets the write end
        _WATCH_ENDS.add(self.fd)
        cmd = [sys.executable, "-m", "zofl.launch", "watchdog", str(os.getpid()), str(home), str(remove or "")]
        env = {k: v for k, v in os.environ.items() if k != "FLWR_HOME"}
        try:
            self.proc = subprocess.Popen(cmd, stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True,
                                         env=env, cwd=str(PROJECT_DIR))
        except BaseException:
            self.close()
            raise
        finally:
            os.close(read_end)

    def done(self) -> None:
        with contextlib.suppress(OSError):
            if self.fd is not None:
                os.write(self.fd, DONE)
        self.close()

    def close(self) -> None:
        """Close our end (once) and reap the watchdog."""
        if self.fd is None:
            return
        _WATCH_ENDS.discard(self.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = None
        proc = getattr(self, "proc", None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)


def _alive(pid: int) -> bool:
    return start_time(pid) is not None


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


def run_config_arg(run_config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())


def flwr_run_command(connection: str, run_config: Mapping[str, Any], app_dir: str | os.PathLike = PROJECT_DIR,
                     federation_config: str = "") -> list[str]:
    """``flwr run APP CONNECTION --stream`` with a run-config (and simulation settings, if any)."""
    cmd = [_bin("flwr"), "run", str(app_dir), connection, "--stream"]
    if federation_config:
        cmd += ["--federation-config", federation_config]
    if run_config:
        cmd += ["--run-config", run_config_arg(run_config)]
    return cmd


def flwr_env(home: Path) -> dict[str, str]:
    """The environment for Flower's commands: quiet, this Python's scripts first, FLWR_HOME = home."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**RAY_ENV_DEFAULTS, **os.environ, **QUIET_ENV, "FLWR_HOME": str(home), "PATH": path}


@dataclass
class SuperLink:
    port: int
    home: Path  # FLWR_HOME holding config.toml with a connection named "zofl"
    env: dict[str, str]
    proc: subprocess.Popen
    log_path: Path
    tracked: list[subprocess.Popen] = field(default_factory=list)  # stopped with the SuperLink

    def popen(self, cmd: list[str], **kwargs) -> subprocess.Popen:
        """Start ``cmd`` (e.g. ``flwr run``) in this SuperLink's environment, in a session of its own;
        it is stopped with the SuperLink (and by the watchdog)."""
        proc = subprocess.Popen(cmd, env=self.env, start_new_session=True, **kwargs)
        self.tracked.append(proc)
        return proc

    def run(self, run_config: Mapping[str, Any], num_supernodes: int, app_dir: str | os.PathLike = PROJECT_DIR,
            cpus_per_client: int = 1, timeout: float = 6 * 3600.0,
            extra_federation_config: str = "") -> subprocess.CompletedProcess:
        """``flwr run APP zofl --stream`` with this run-config and federation size; returns its output.

        ``extra_federation_config``: more simulation settings, e.g. "init-args-num-cpus=1" (Ray's CPUs)."""
        federation = f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client}"
        cmd = flwr_run_command("zofl", run_config, app_dir, f"{federation} {extra_federation_config}".strip())
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)

    def stop_run(self, run_id: int | None, timeout: float = 20.0) -> bool:
        """``flwr stop RUN_ID``: the SuperLink marks the run stopped and its ServerApp ends at its next
        call to the SuperLink (within a round; what it recorded stays). Whether it succeeded."""
        if run_id is None:
            return False
        try:
            res = subprocess.run([_bin("flwr"), "stop", str(run_id), "zofl"], env=self.env, capture_output=True,
                                 text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return res.returncode == 0


def _guarded_home(stack: contextlib.ExitStack, workdir: str | os.PathLike | None,
                  prefix: str) -> tuple[Path, Path, Watchdog]:
    """The set-up every runtime we start shares, its undoing pushed on ``stack``: SIGTERM and SIGHUP run the
    cleanup (``exit_on_terminate``), ``workdir`` (a temporary folder when None, removed at the end), a private
    FLWR_HOME in it that the runtime's processes inherit, and the watchdog that stops them if this process dies
    first. Returns (work folder, FLWR_HOME, watchdog): ``watch.done()`` once the processes are stopped."""
    stack.enter_context(exit_on_terminate())
    temporary = workdir is None
    if temporary:
        workdir = tempfile.mkdtemp(prefix=prefix)
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
    work = Path(workdir)
    home = work / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    watch = Watchdog(home, work if temporary else None)
    stack.callback(watch.close)  # if the stop did not finish: the watchdog acts
    return work, home, watch


@contextlib.contextmanager
def local_superlink(workdir: str | os.PathLike | None = None, startup_timeout: float = 60.0,
                    extra_env: Mapping[str, str] | None = None) -> Iterator[SuperLink]:
    """A simulation SuperLink on a free port for the duration of the ``with`` block; every process
    it (and ``SuperLink.popen``) starts is stopped when the block ends, or by the watchdog when this
    process dies without ending it (module docstring). ``extra_env``: more environment variables for the
    SuperLink and what it starts (the ServerApp, Ray), e.g. ``zofl run``'s start time (``zofl.core.startup``)."""
    with contextlib.ExitStack() as stack:
        work, home, watch = _guarded_home(stack, workdir, "zofl-superlink-")
        port = free_port()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "zofl"\n\n[superlink.zofl]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
        env = {**flwr_env(home), **(extra_env or {})}
        log_path = work / "superlink.log"
        log = stack.enter_context(open(log_path, "w"))
        proc = subprocess.Popen(
            [_bin("flower-superlink"), "--insecure", "--simulation", "--disable-runtime-dependency-installation",
             "--port", str(port), "--database", str(work / "state.db")],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent)
        link = SuperLink(port, home, env, proc, log_path)
        try:
            wait_for_port(port, startup_timeout, proc)
            yield link
        finally:
            stop_all([proc, *link.tracked], home)
            watch.done()


RAY_START_TIMEOUT_S = 300.0  # for one `ray start` (about 7 s on an idle 2-core machine; minutes at load 12)


RAY_OBJECT_STORE_BYTES = 200_000_000  # per node: cells and ClientApps pass small objects (Ray's default: 30% of RAM)


def _ray_node_ports() -> list[str]:
    """The ports of one Ray node, each free, and a range of 1,000 for its workers at a random place: two nodes on
    one machine otherwise take Ray's same fixed defaults (the dashboard agent's 52365, ...) and hand out the
    same worker ports."""
    import random

    low = random.randrange(20_000, 32_000, 1000)  # below the ephemeral ports free_port() hands out (32768-)
    names = ("node-manager", "object-manager", "dashboard-agent-grpc", "dashboard-agent-listen", "metrics-export",
             "runtime-env-agent")
    return [f"--{name}-port={free_port()}" for name in names] + [f"--min-worker-port={low + 2}",
                                                                  f"--max-worker-port={low + 999}"]


def _wait_for_nodes(address: str, nodes: int, env: Mapping[str, str], timeout: float) -> None:
    """Until ``ray status`` counts ``nodes`` live nodes (it lags behind `ray start`)."""
    import re

    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = subprocess.run([_bin("ray"), "status", f"--address={address}"], env=env, capture_output=True,
                                text=True, timeout=timeout).stdout
        if len(re.findall(r"^\s*1 node_", status.split("Pending")[0], re.M)) >= nodes:
            return
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster at {address} has not {nodes} live nodes after {timeout:.0f} s: "
                       f"{status[-800:]}")


@dataclass(frozen=True)
class RayCluster:
    address: str  # "127.0.0.1:PORT", what ray.init(address=...) and RAY_ADDRESS take
    home: Path  # the private FLWR_HOME its processes carry (zofl.launch.stop_all finds them by it)
    temp_dir: str  # Ray's own folder (its sessions, logs, sockets, the address file)


@contextlib.contextmanager
def local_ray_cluster(nodes: int = 1, cpus_per_node: int = 1, workdir: str | os.PathLike | None = None,
                      timeout: float = RAY_START_TIMEOUT_S) -> Iterator[RayCluster]:
    """A Ray cluster on this machine for the ``with`` block: ``ray start --head``, then ``nodes - 1`` nodes
    joining it (``ray start --address``), each with ``cpus_per_node`` CPUs and ports of its own; yields a
    ``RayCluster`` (its address: what ``ray.init(address=...)`` and ``RAY_ADDRESS`` take). Its
    processes carry a private FLWR_HOME, so they are stopped as a SuperLink's are: when the block ends, or by
    the watchdog when this process dies without ending it (module docstring). Used by ``zofl compare`` (one
    Ray runtime kept for all the cells a SuperLink runs, when asked) and by the tests and benchmarks of ``--via
    ray`` and of the simulation on a multi-node cluster."""
    with contextlib.ExitStack() as stack:
        work, home, watch = _guarded_home(stack, workdir, "zofl-ray-")
        env = {**flwr_env(home)}
        env.pop("RAY_ADDRESS", None)
        port = free_port()
        address = f"127.0.0.1:{port}"
        # Ray's files in a folder of ours, not /tmp/ray: `ray start` notes its address there, and a `ray.init()`
        # with no address anywhere on the machine (every Flower simulation) joins the cluster so noted -- or,
        # once it is stopped, waits for it for ever
        ray_tmp = tempfile.mkdtemp(prefix="zr-")  # short: Ray's socket paths must fit in 107 bytes
        stack.callback(shutil.rmtree, ray_tmp, ignore_errors=True)
        common = [f"--num-cpus={cpus_per_node}", "--num-gpus=0", f"--object-store-memory={RAY_OBJECT_STORE_BYTES}",
                  "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        procs: list[subprocess.Popen] = []
        try:
            for i in range(nodes):
                which = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}"] if i == 0 \
                    else [f"--address={address}"]
                log = stack.enter_context(open(work / f"ray-node-{i}.log", "w"))
                proc = subprocess.Popen([_bin("ray"), "start", *which, *common, *_ray_node_ports()], env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=die_with_parent)
                procs.append(proc)
                if proc.wait(timeout) != 0:  # `ray start` returns once its node runs (its daemons stay, detached)
                    raise RuntimeError(f"ray start (node {i}) failed: "
                                       f"{(work / f'ray-node-{i}.log').read_text()[-1500:]}")
            if nodes > 1:
                _wait_for_nodes(address, nodes, env, timeout)
            yield RayCluster(address, home, ray_tmp)
        finally:
            stop_all(procs, home)
            watch.done()


def stop_all(procs: list[subprocess.Popen], home: Path, grace: float = STOP_GRACE_S) -> None:
    """Stop ``procs`` (each the leader of its own session), their descendants, their process groups and
    every process that inherited FLWR_HOME = ``home`` (Ray's daemons and actors, Flower's ServerApp
    process), all at once: SIGTERM, ``grace`` s, SIGKILL; then reap ``procs``."""
    pids = {p.pid for p in procs if p.poll() is None} | set(processes_with_env("FLWR_HOME", str(home)))
    for p in procs:  # their descendants, noted before any dies (Ray's agents carry no FLWR_HOME, and are
        pids |= set(descendants(p.pid))  # reparented away from the tree once their raylet is gone)
    for p in procs:  # the rest of each group (e.g. workers that left no FLWR_HOME behind)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
    terminate(sorted(pids), grace)
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(2)


BLAS_THREADS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def one_blas_thread():
    """One BLAS thread in the processes started inside the block (a variable already set is kept).

    numpy's OpenBLAS otherwise starts a thread per core in every runner worker, and ``parallel``
    workers on as many cores then spin against each other: two CIFAR-10 cells at once ran 4.6x
    slower (their local steps 17x) with the same numbers (docs/benchmark-blas.md). Ray's workers
    (--via flower) already run with one thread (Ray sets OMP_NUM_THREADS to a task's CPUs)."""
    old = {k: os.environ.get(k) for k in BLAS_THREADS_ENV}
    for k in BLAS_THREADS_ENV:
        os.environ.setdefault(k, "1")
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__" and sys.argv[1:2] == ["watchdog"]:
    watchdog(int(sys.argv[2]), sys.argv[3], sys.argv[4] or None)
