"""Comparison cells as tasks on a Ray cluster: ``zofl compare GRID --via ray [--address ADDR]``.

Each cell is one Ray task (one CPU) that runs the cell with the in-process engine (``run_inprocess``,
``workers = 0``: the same ServerApp code, strategies, ClientApps and numbers as ``--via inprocess``) in a
temporary folder of the node it landed on, and returns the cell's files; the runner checks them and writes
them under ``--out`` on this machine, so the nodes need no shared file system. Ray places the tasks (one per
CPU of every node); the grid resumes as any other (a finished cell is skipped, a cell whose task was lost
runs again).

What every node must have, checked per cell (a cell that fails a check is reported as failed, its files are
not written):
* the same zofl code (a digest of the package's source files), numpy and Python as this machine: a node
  with other code could give other numbers;
* the cell's data at the same ``data-dir`` (or the built-in data): the data's fingerprint in the cell's
  data.json must be this machine's.

What a node sends back is bounded and checked before anything is written (``unpack``): at most
``MAX_CELL_FILES`` files and ``MAX_CELL_BYTES`` bytes, plain names of the run folder's files (no path
separators, no dot-dot), each written to a temporary folder first and moved into place whole.
"""
from __future__ import annotations

import hashlib
import json
import platform
import re
import shutil
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping

MAX_CELL_FILES = 32
MAX_CELL_BYTES = 2 << 30  # 2 GiB: a cell's checkpoint and records (a CIFAR-10 cell of 1,000 rounds is ~30 MB)
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class CellRefused(ValueError):
    """What a node sent back for a cell is not a cell of ours (reported as the cell's failure)."""


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 over the zofl package's source files (relative path and bytes, in sorted order)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def environment() -> dict[str, str]:
    """What must be equal on every node for a cell to give this machine's numbers."""
    from importlib.metadata import version

    import numpy

    return {"zofl code": code_digest(), "numpy": numpy.__version__, "flwr": version("flwr"),
            "python": platform.python_version()}


def run_cell(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One cell with the in-process engine in a temporary folder (runs inside a Ray task): its files, the
    node's environment, the seconds it took and its error ("" if none)."""
    from .inprocess import run_inprocess

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zofl-cell-") as tmp:
        try:
            run_inprocess({**cfg, "output-dir": tmp}, workers=0)
            err = ""
        except Exception as exc:  # reported, the grid goes on
            err = repr(exc)
        folder = Path(tmp) / str(cfg["run-name"])
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}
    import ray

    node = f"{ray.get_runtime_context().get_node_id()[:12]} ({platform.node()})" if ray.is_initialized() \
        else platform.node()
    return {"environment": environment(), "seconds": time.perf_counter() - t, "error": err, "files": files,
            "node": node}


def unpack(reply: Any, dest: Path, output_dir: str, data_fingerprint: str | None) -> None:
    """Check a node's ``reply`` for one cell and write its files to ``dest`` (whole, or not at all).

    The paths the node's run recorded (config.json's output-dir, summary.json's results_dir) are set to
    where the files now are, as a local run would have written them. ``data_fingerprint``: this machine's
    fingerprint of the cell's data file (None: not checked, e.g. a task that gives none)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("files"), dict):
        raise CellRefused("not a cell's reply")
    ours = environment()
    if reply.get("environment") != ours:
        raise CellRefused(f"node {str(reply.get('node'))[:80]!r} runs other code or libraries: "
                          f"{_diff(reply.get('environment'), ours)}")
    files = reply["files"]
    if len(files) > MAX_CELL_FILES:
        raise CellRefused(f"{len(files)} files (at most {MAX_CELL_FILES})")
    total = 0
    for name, data in files.items():
        if not isinstance(name, str) or not FILE_NAME.match(name) or not isinstance(data, bytes):
            raise CellRefused(f"file name {str(name)[:80]!r} is not a run folder's file")
        total += len(data)
    if total > MAX_CELL_BYTES:
        raise CellRefused(f"{total} bytes (at most {MAX_CELL_BYTES})")
    for name in ("config.json", "summary.json"):
        if name not in files:
            raise CellRefused(f"no {name}")
    config, summary = _json(files, "config.json"), _json(files, "summary.json")
    if data_fingerprint is not None:
        theirs = str(_json(files, "data.json").get("fingerprint", "")) if "data.json" in files else ""
        if theirs.split("-")[0] != data_fingerprint:
            raise CellRefused(f"node {str(reply.get('node'))[:80]!r} read other data (fingerprint "
                              f"{theirs[:40]!r}, this machine's file {data_fingerprint!r}): give every node the "
                              f"same data-dir")
    config["output-dir"] = output_dir
    summary["results_dir"] = str(dest)
    files = {**files, "config.json": _dump(config), "summary.json": _dump(summary)}
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))  # beside dest: the rename is atomic
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _json(files: Mapping[str, bytes], name: str) -> dict:
    try:
        obj = json.loads(files[name])
    except (ValueError, UnicodeDecodeError) as exc:
        raise CellRefused(f"{name} is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise CellRefused(f"{name} is not a JSON object")
    return obj


def _dump(obj: dict) -> bytes:
    from .results import run_json_text

    return run_json_text(obj).encode()


def _diff(theirs: Any, ours: Mapping[str, str]) -> str:
    if not isinstance(theirs, dict):
        return "no environment given"
    return "; ".join(f"{k} {str(theirs.get(k))[:16]} here {v[:16]}" for k, v in ours.items() if theirs.get(k) != v)


def run_on_ray(cells: list[dict[str, Any]], address: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """Submit every cell (its full run-config, output-dir and run-name included) as a Ray task on the
    cluster at ``address``; yield (cell, reply) as they finish, the reply an exception if the task failed."""
    import ray

    from .launch import BLAS_THREADS_ENV  # one BLAS thread per cell, as --via inprocess's workers

    ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": {k: "1" for k in BLAS_THREADS_ENV}})
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        print(f"Ray cluster: {len(nodes)} node(s), {int(ray.cluster_resources().get('CPU', 0))} CPUs", flush=True)
        task = ray.remote(num_cpus=1)(run_cell)
        pending = {task.remote(c): c for c in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    yield cell, ray.get(ref)
                except Exception as exc:  # the task failed (its node died, ...): reported, the grid goes on
                    yield cell, exc
    finally:
        ray.shutdown()


def ray_cell_result(cell: dict[str, Any], reply: Any, cells_dir: Path,
                    fingerprint: str | None) -> tuple[str, float, str, str]:
    """(cell id, seconds, error, node) for the runner's report, the cell's files written if the reply is good."""
    name = str(cell["run-name"])
    if isinstance(reply, BaseException):
        return name, 0.0, f"the Ray task failed: {reply!r}"[:2000], "?"
    node = str(reply.get("node"))[:80] if isinstance(reply, dict) else "?"
    secs = reply.get("seconds") if isinstance(reply, dict) else None
    secs = float(secs) if isinstance(secs, (int, float)) else 0.0
    if isinstance(reply, dict) and reply.get("error") and "summary.json" not in (reply.get("files") or {}):
        return name, secs, str(reply["error"])[:2000], node  # nothing to write
    try:
        unpack(reply, cells_dir / name, str(cells_dir), fingerprint)
    except CellRefused as exc:
        return name, 0.0, f"refused what node {node} sent: {exc}", node
    return name, secs, str(reply.get("error", ""))[:2000], node
