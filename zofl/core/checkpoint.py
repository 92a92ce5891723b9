"""Checkpoints: the server's whole state after a round, written atomically.

All randomness is derived from (seed, round, client) (``seed_sequence``), so the round (or
version) number is the whole random state: there is no generator state to save. File layout
(``checkpoint.npz``): ``round``, ``wall_s``, ``x`` and ``mem/<name>`` for the rest of the method's
state (``Method.state_dict``), plus ``async/<name>`` for the asynchronous engine's queue.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

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
    """(round, wall_s, state, async extras) of the checkpoint in ``run_dir``, or None if there is none."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    with np.load(path) as ck:
        state = {"x": np.array(ck["x"])}
        state.update({k[4:]: np.array(ck[k]) for k in ck.files if k.startswith("mem/")})
        extra = {k[6:]: np.array(ck[k]) for k in ck.files if k.startswith("async/")}
        return int(ck["round"]), float(ck["wall_s"]), state, extra
