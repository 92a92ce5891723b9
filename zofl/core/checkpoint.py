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
