"""Checkpoints: the server's whole state after a round, written atomically.

All randomness is derived from (seed, round, client) (``seed_sequence``), so the round (or
version) number is the whole random state: there is no generator state to save. File layout
(``checkpoint.npz``): ``round``, ``wall_s``, ``x`` and ``mem/<name>`` for the rest of the method's
state (``Method.state_dict``), plus ``async/<name>`` for the engine's extras (the synchronous
engines' simulated clock, the asynchronous engine's queue).

A resume trusts nothing in it: every array must have the dtype and shape of a fresh state of the
same run, hold finite values, and pass the magnitude rule (``magnitude_problem``); the round and
extras are checked likewise (``zofl.core.run.resume_point``). The file is written to a new
temporary file (never through a link) and read without following one.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Mapping

import numpy as np
from numpy.lib.npyio import NpzFile

from ..results import CHECKPOINT_FILE, RunFolderError, create_new, open_nofollow
from ..safeio import load_json

CHECKPOINT = CHECKPOINT_FILE
TMP = f".{CHECKPOINT}.tmp.npz"
SCALARS = ("round", "wall_s")  # besides x, mem/<name> and async/<name>
SYNC_EXTRA = ("sim_clock",)  # SyncRun.checkpoint_extra
RESTART = "delete the run folder (or choose another run-name) to start again"


def save_checkpoint(run_dir: Path, k: int, wall_s: float, state: Mapping[str, np.ndarray],
                    extra: Mapping[str, np.ndarray] | None = None) -> None:
    """Round k's state; a crash mid-write leaves the previous checkpoint intact."""
    arrays = {"round": np.array(k), "wall_s": np.array(wall_s), "x": state["x"]}
    arrays.update({f"mem/{key}": v for key, v in state.items() if key != "x"})
    arrays.update({f"async/{key}": v for key, v in (extra or {}).items()})
    with os.fdopen(create_new(run_dir, TMP), "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(run_dir / TMP, run_dir / CHECKPOINT)


def refuse(path: Path, what: str) -> RunFolderError:
    """The one-line refusal of a checkpoint that is not this run's (or was edited)."""
    return RunFolderError(f"{path}: {what}; it is not a checkpoint of this run: restore it, or {RESTART}")


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the file, read without following a link and without unpickling anything."""
    try:
        with os.fdopen(open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            ck = np.load(f, allow_pickle=False)
            if not isinstance(ck, NpzFile):
                raise ValueError("not an .npz archive")
            with ck:
                return {k: np.array(ck[k]) for k in ck.files}
    except RunFolderError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, MemoryError) as exc:
        # MemoryError: an array header claiming more than this machine has (numpy allocates it before reading)
        raise RunFolderError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc}); "
                             f"{RESTART}") from None


def scalar(path: Path, name: str, a: np.ndarray, kind: str, low: float = 0.0) -> int | float:
    """A 0-d array of ``kind`` ("i": an integer dtype, "f": float64) holding a finite value >= ``low``."""
    ok = a.ndim == 0 and (a.dtype.kind in "iu" if kind == "i" else a.dtype == np.float64)
    if not ok:
        raise refuse(path, f"array {name!r} is {a.dtype} of shape {a.shape}, not one "
                           f"{'integer' if kind == 'i' else 'float64'}")
    v = int(a) if kind == "i" else float(a)
    if not (np.isfinite(v) and v >= low):
        raise refuse(path, f"array {name!r} is {v}, not a finite number >= {low:g}")
    return v


def load_checkpoint(run_dir: Path) -> tuple[int, float, dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """(round, wall_s, state, extras) of the checkpoint in ``run_dir``, or None if there is none.

    A file that is not a whole checkpoint (truncated, a flipped byte, a key missing or unknown, a
    round or wall_s that is not one number >= 0) raises ``RunFolderError`` naming it."""
    path = run_dir / CHECKPOINT
    if not os.path.lexists(path):
        return None
    arrays = _read_arrays(path)
    missing = [k for k in (*SCALARS, "x") if k not in arrays]
    unknown = [k for k in arrays if k not in (*SCALARS, "x") and not k.startswith(("mem/", "async/"))]
    if missing or unknown:
        raise refuse(path, f"arrays {missing} missing, {unknown} unknown")
    k = scalar(path, "round", arrays["round"], "i")
    wall_s = scalar(path, "wall_s", arrays["wall_s"], "f")
    state = {"x": arrays["x"]}
    state.update({n[4:]: a for n, a in arrays.items() if n.startswith("mem/")})
    extra = {n[6:]: a for n, a in arrays.items() if n.startswith("async/")}
    return k, wall_s, state, extra


def magnitude_problem(a: np.ndarray) -> str | None:
    """Why the values of a float array cannot be a run's, or None: NaN or Inf, or a magnitude whose
    square overflows the dtype (the sum of squares, i.e. the squared norm, is not finite).

    The rule: values must stay representable after the methods' own arithmetic, and every method
    squares its state (losses, ||x||^2 terms, the estimators' norms and inner products). A value of
    1e300 is finite but its square is not. A run whose replies pass reply-max-abs (default 1e6) moves
    its state by bounded steps and never gets near ~1e154 (sqrt of the float64 maximum); a bound tied
    to reply-max-abs instead would refuse checkpoints that legitimate runs write themselves (a model
    may exceed any one reply's bound after many rounds, e.g. under attack = 'large')."""
    if a.dtype.kind != "f" or not a.size:
        return None
    if not np.all(np.isfinite(a)):
        return "holds NaN or Inf"
    flat = a.ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        square = float(np.dot(flat, flat))
    if not np.isfinite(square):
        return (f"holds values as large as {float(np.abs(flat).max()):.3g}, whose squared norm overflows "
                f"{a.dtype}: no run computes with such a state")
    return None


def array_problem(have: np.ndarray, want: np.ndarray) -> str | None:
    """Why a loaded array cannot stand for ``want`` (its counterpart in a fresh state of the same run):
    another dtype (exactly the fresh one: float64 stays float64, no float16, complex or bool for it),
    another shape, or values that fail ``magnitude_problem``."""
    if have.dtype != want.dtype:
        return f"has dtype {have.dtype}, this run's is {want.dtype}"
    if have.shape != np.shape(want):
        return f"has shape {have.shape}, this run's is {np.shape(want)}"
    return magnitude_problem(have)


def check_state(path: Path, state: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> None:
    """A loaded state must have the arrays (names, dtypes, shapes) of ``expected`` (a fresh state of
    the same run), finite and of a sane magnitude (``array_problem``); else ``RunFolderError`` naming
    ``path`` and the array."""
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise RunFolderError(f"{path} does not hold this run's state (missing {missing}, unexpected {extra}); "
                             f"restore it, or {RESTART}")
    for name, want in expected.items():
        problem = array_problem(state[name], np.asarray(want))
        if problem:
            raise refuse(path, f"array {name!r} {problem}")


def check_sync_extra(path: Path, extra: Mapping[str, np.ndarray]) -> None:
    """The synchronous engines' extras: exactly the simulated clock, one float64 >= 0."""
    if sorted(extra) != sorted(SYNC_EXTRA):
        raise refuse(path, f"the engine's arrays are {sorted('async/' + k for k in extra)}, a synchronous run "
                           f"writes {['async/' + k for k in SYNC_EXTRA]}")
    scalar(path, "async/sim_clock", extra["sim_clock"], "f")


# -- checks of a checkpoint's queue before a resume (zofl.core.run.resume_point) ----------------
ASYNC_EXTRA = ("now", "task_no", "policy", "rejoins", "lost")  # AsyncRun.checkpoint_extra, besides task<i>/...
TASK_META = ("pid", "task", "H", "version", "sent_at", "due")


def check_async_extra(path, extra: dict[str, np.ndarray], method, fresh: dict[str, np.ndarray],
                      k: int) -> None:
    """Refuse (``RunFolderError`` naming ``path`` and the array) a checkpointed queue that is not one this
    run can have written at version ``k``: arrays missing, unknown or of another dtype or shape; a clock,
    task number or policy count that is negative or not finite; a client id outside 0..m-1, a task number
    not below task_no, a task's version above k; a task's arrays not those of a task on a fresh state
    (``fresh``: names, dtypes, shapes) or failing the magnitude rule; a task's config not a JSON object."""
    cfg, m = method.cfg, method.cfg.num_clients
    n_tasks = 0
    while f"task{n_tasks}/meta" in extra:
        n_tasks += 1
    heads = {f"task{i}" for i in range(n_tasks)}
    tasks = {f"{h}/{part}" for h in heads for part in ("meta", "config")}
    missing = sorted((set(ASYNC_EXTRA) | tasks) - set(extra))
    unknown = sorted(n for n in extra if n not in ASYNC_EXTRA and n not in tasks
                     and not (n.partition("/")[0] in heads and n.partition("/")[2].startswith("arrays/")))
    if missing or unknown:
        raise refuse(path, f"the asynchronous queue's arrays {['async/' + n for n in missing]} are missing, "
                           f"{['async/' + n for n in unknown]} unknown")
    scalar(path, "async/now", extra["now"], "f")
    task_no = scalar(path, "async/task_no", extra["task_no"], "i")
    policy = extra["policy"]
    if not (policy.shape == (3,) and policy.dtype.kind in "iu"
            and 0 <= policy[0] and 0 <= policy[2] <= policy[1] < m):
        raise refuse(path, f"array 'async/policy' is {policy.dtype} {policy.tolist()}: not three integers (failed "
                           f"windows >= 0, results in 0..{m - 1}, usable <= results)")
    rejoins = extra["rejoins"]
    if not (rejoins.ndim == 2 and rejoins.shape[1] == 3 and rejoins.dtype == np.float64
            and np.all(np.isfinite(rejoins)) and np.all(rejoins[:, 1:] == np.round(rejoins[:, 1:]))
            and np.all(rejoins[:, 0] >= 0) and np.all((0 <= rejoins[:, 1]) & (rejoins[:, 1] < task_no))
            and np.all((0 <= rejoins[:, 2]) & (rejoins[:, 2] < m))):
        raise refuse(path, f"array 'async/rejoins' ({rejoins.dtype}, shape {rejoins.shape}) is not float64 rows "
                           f"(time >= 0, task number in 0..{task_no - 1}, client in 0..{m - 1})")
    lost = extra["lost"]
    if not (lost.ndim == 1 and lost.dtype.kind in "iu" and np.all((0 <= lost) & (lost < m))):
        raise refuse(path, f"array 'async/lost' ({lost.dtype}, shape {lost.shape}) is not client ids in 0..{m - 1}")
    want_arrays = method.plan_task(fresh, 0, 0, 0).arrays
    for i in range(n_tasks):
        _check_task(path, extra, i, m, task_no, k, cfg.clock == "simulated", want_arrays)


def _check_task(path, extra: dict[str, np.ndarray], i: int, m: int, task_no: int, k: int, simulated: bool,
                want_arrays: dict[str, np.ndarray]) -> None:
    """One task in flight: its meta (client, task number, H, version, sent_at, due), config and arrays."""
    name = f"async/task{i}/meta"
    meta = extra[f"task{i}/meta"]
    if meta.shape != (len(TASK_META),) or meta.dtype != np.float64:
        raise refuse(path, f"array {name!r} is {meta.dtype} of shape {meta.shape}, not {len(TASK_META)} float64 "
                           f"{TASK_META}")
    pid, n, H, version, sent_at, due = meta
    whole = all(np.isfinite(v) and v == round(v) for v in (pid, n, H, version))
    if not (whole and 0 <= pid < m and 0 <= n < task_no and H >= 0 and 0 <= version <= k
            and np.isfinite(sent_at) and sent_at >= 0
            and (np.isfinite(due) and due >= sent_at if simulated else np.isnan(due))):
        raise refuse(path, f"array {name!r} is {meta.tolist()}: not a task of this run (client in 0..{m - 1}, "
                           f"task number below {task_no}, H >= 0, version in 0..{k}, sent_at >= 0, due "
                           f"{'>= sent_at' if simulated else 'NaN (wall clock)'})")
    config = extra[f"task{i}/config"]
    try:
        ok = config.ndim == 0 and config.dtype.kind == "U" and isinstance(load_json(str(config), str(path)), dict)
    except ValueError:  # no JSON, or nested too deep (zofl.safeio: json's parser recursed, a RecursionError)
        ok = False
    if not ok:
        raise refuse(path, f"array 'async/task{i}/config' is not a JSON object (a task's config)")
    prefix = f"task{i}/arrays/"
    arrays = {n[len(prefix):]: a for n, a in extra.items() if n.startswith(prefix)}
    if sorted(arrays) != sorted(want_arrays):
        raise refuse(path, f"task {i} carries arrays {sorted(arrays)}, a task of this run {sorted(want_arrays)}")
    for key, want in want_arrays.items():
        problem = array_problem(arrays[key], np.asarray(want))
        if problem:
            raise refuse(path, f"array 'async/{prefix}{key}' {problem}")
