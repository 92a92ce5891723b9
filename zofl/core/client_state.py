"""The state a client keeps across rounds (e.g. SCAFFOLD's c_i) when its SuperNode serves several clients.

A node serving one client keeps it in Flower's ``Context.state`` (``zofl.client_app.load_state``). A simulated node
serving a share of clients (run-config clients-per-node, ``zofl.core.shares``) cannot: Flower's simulation runs two
messages to one node at once and writes back whichever Context comes last, so one client's state would overwrite
another's. Each such client's arrays live in a file of its own instead, ``<FLWR_HOME or the temporary
folder>/zofl-client-state/run-<run id>/client-<i>.npz``, written by a rename (a reader sees the old or the new
file whole). ``zofl run``'s FLWR_HOME is its private SuperLink's, removed with it (also after kill -9, by its
watchdog); the ServerApp removes the run's folder when the run ends (``remove``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

FOLDER = "zofl-client-state"


def run_dir(run_id: int) -> Path:
    return Path(os.environ.get("FLWR_HOME") or tempfile.gettempdir()) / FOLDER / f"run-{int(run_id)}"


def path(run_id: int, pid: int) -> Path:
    return run_dir(run_id) / f"client-{int(pid)}.npz"


def load(run_id: int, pid: int) -> dict[str, np.ndarray]:
    """Client ``pid``'s arrays, {} before its first save."""
    try:
        with np.load(path(run_id, pid), allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        return {}


def save(run_id: int, pid: int, state: dict[str, np.ndarray]) -> None:
    if not state:
        return
    target = path(run_id, pid)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **state)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove(run_id: int) -> None:
    shutil.rmtree(run_dir(run_id), ignore_errors=True)
