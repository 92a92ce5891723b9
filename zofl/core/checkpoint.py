"""Checkpoints: the server's whole state after a round, written atomically.

All randomness is derived from (seed, round, client) (``seed_sequence``), so the round (or
version) number is the whole random state: there is no generator state to save. File layout
(``checkpoint.npz``): ``round``, ``wall_s``, ``x`` and ``mem/<name>`` for the rest of the method's
state (``Method.state_dict``), plus ``async/<name>`` for the asynchronous engine's queue.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Mapping

import numpy as np

from ..results import RunFolderError

CHECKPOINT = "checkpoint.npz"


def save_checkpoint(run_dir: Path, k: int, wall_s: float, state: Mapping[str, np.ndarray],
                    extra: Mapping[str, np.ndarray] | None = None) -> None:
    """Round k's state; a crash mid-write leaves the previous checkpoint intact."""
    arrays = {"round": np.array(k), "wall_s": np.array(wall_s), "x": state["x"]}
    arrays.update({f"mem/{key}": v for key, v in state.items() if key != "x"})
    arrays.update({f"async/{key}": v for key, v in (extra or {}).items()})
    tmp = run_dir / f".{CHECKPOINT}.tmp.npz"
    np.savez(tmp, **arrays)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / CHECKPOINT)


def load_checkpoint(run_dir: Path) -> tuple[int, float, dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """(round, wall_s, state, async extras) of the checkpoint in ``run_dir``, or None if there is none.

    A file that is not a whole checkpoint (truncated, a flipped byte, a key missing) raises
    ``RunFolderError`` naming it."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as ck:
            state = {"x": np.array(ck["x"])}
            state.update({k[4:]: np.array(ck[k]) for k in ck.files if k.startswith("mem/")})
            extra = {k[6:]: np.array(ck[k]) for k in ck.files if k.startswith("async/")}
            return int(ck["round"]), float(ck["wall_s"]), state, extra
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise RunFolderError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc}); "
                             f"delete the run folder to start again") from None


def check_state(path: Path, state: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> None:
    """A loaded state must have the arrays (names, shapes) of ``expected`` (a fresh state of the same
    run), all finite where they hold numbers; else ``RunFolderError`` naming ``path``."""
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise RunFolderError(f"{path} does not hold this run's state (missing {missing}, unexpected {extra})")
    for name, want in expected.items():
        have = state[name]
        if np.shape(have) != np.shape(want):
            raise RunFolderError(f"{path}: array {name!r} has shape {np.shape(have)}, this run's is {np.shape(want)}")
        if np.issubdtype(have.dtype, np.number) and not np.all(np.isfinite(have)):
            raise RunFolderError(f"{path}: array {name!r} holds NaN or Inf")
