"""Start a Flower SuperLink of our own and submit runs to it with ``flwr run`` (used by tests,
benchmarks and scripts; users can just call ``flwr run``).

``flwr run`` on its own starts a background SuperLink that never stops and, by default,
reinstalls the App's dependencies with uv for every run (gigabytes with torch). Here we start
``flower-superlink --simulation --disable-runtime-dependency-installation`` on a free port,
declare it in a temporary FLWR_HOME, run, and stop every process we started, including those
that left the SuperLink's process group (Ray's daemons, Flower's ServerApp process): they are found
by the private FLWR_HOME they inherited.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

QUIET_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
PROJECT_DIR = Path(__file__).resolve().parent.parent


def _bin(name: str) -> str:
    """A console script of this Python environment (falls back to PATH)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def die_with_parent() -> None:
    """``preexec_fn`` of the processes we start (Linux): the child gets SIGKILL when the thread that
    started it ends, even if this process is SIGKILLed and no ``finally`` runs (prctl
    PR_SET_PDEATHSIG). Their own children (Flower's ServerApp and SuperExec processes) watch their
    parent with ``--parent-pid``. Elsewhere a no-op."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


@contextlib.contextmanager
def exit_on_terminate() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP (``kill``, ``timeout``, a closed terminal) raise
    SystemExit, so the ``finally`` clauses that stop our processes run (Python's default for them is
    to die on the spot). Only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
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


def kill_descendants_by_env(key: str, value: str, timeout: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process that inherited ``key=value``: what a SuperLink started,
    even in other sessions (Flower's ServerApp process, Ray's daemons and actors), which killing its
    process group misses. Returns the PIDs found."""
    pids = processes_with_env(key, value)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
    return pids


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


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
    return {**os.environ, **QUIET_ENV, "FLWR_HOME": str(home), "PATH": path}


@dataclass
class SuperLink:
    port: int
    home: Path  # FLWR_HOME holding config.toml with a connection named "zofl"
    env: dict[str, str]
    proc: subprocess.Popen
    log_path: Path

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


@contextlib.contextmanager
def local_superlink(workdir: str | os.PathLike | None = None, startup_timeout: float = 60.0) -> Iterator[SuperLink]:
    """A simulation SuperLink on a free port for the duration of the ``with`` block."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(exit_on_terminate())
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="zofl-superlink-"))
        work = Path(workdir)
        home = work / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        port = free_port()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "zofl"\n\n[superlink.zofl]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
        env = flwr_env(home)
        log_path = work / "superlink.log"
        log = stack.enter_context(open(log_path, "w"))
        proc = subprocess.Popen(
            [_bin("flower-superlink"), "--insecure", "--simulation", "--disable-runtime-dependency-installation",
             "--port", str(port), "--database", str(work / "state.db")],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent)
        try:
            wait_for_port(port, startup_timeout, proc)
            yield SuperLink(port, home, env, proc, log_path)
        finally:
            stop_process(proc)
            # the SuperLink's descendants in other sessions (Ray's daemons and actors, Flower's ServerApp
            # process) inherited FLWR_HOME = this private home: none outlives the block
            kill_descendants_by_env("FLWR_HOME", str(home))
