"""Device speeds and injected faults: what makes clients slow or faulty, as pure functions of seeds.

* Device speed (``speed-profile``, ``speed-param``, ``step-time-s``): client i has a fixed speed
  factor s_i in (0, 1] drawn from (seed, i); after its real local solve of t seconds and K local
  steps it waits until t / s_i + K step-time-s / s_i have passed: its wall time is in proportion to
  its work, and slower devices miss a round deadline (``round-deadline-s``) first.
  ``uniform``: s_i ~ U(speed-param, 1); ``lognormal``: s_i = exp(-|N(0, speed-param^2)|); ``slow``:
  s_i = speed-param for the clients listed in ``slow-clients``, 1 for the others; ``none``: s_i = 1.
* Faults (``crash-prob``, ``hang-prob``, ``corrupt-prob``), drawn per (seed, round, client): a crash
  raises in the client; a hang sleeps ``hang-s`` seconds (past the deadline) before replying; a
  corrupt reply has NaN, Inf, a wrong shape or an absurd magnitude. The server drops all of them.
"""
from __future__ import annotations

import numpy as np

from .algorithms.smoothing import seed_sequence

STREAM_SPEED = 0x71
STREAM_FAULT = 0x72
CORRUPTIONS = ("nan", "inf", "shape", "huge")


class InjectedCrash(RuntimeError):
    """A client failure injected by ``crash-prob``."""


def speed_factor(seed: int, pid: int, profile: str, param: float, slow: str = "") -> float:
    """s_i in (0, 1], fixed per client by (seed, pid)."""
    if profile == "none":
        return 1.0
    if profile == "slow":
        return float(param) if pid in {int(t) for t in slow.split(",") if t} else 1.0
    rng = np.random.default_rng(seed_sequence(seed, pid, STREAM_SPEED))
    if profile == "uniform":
        return float(rng.uniform(param, 1.0))
    if profile == "lognormal":
        return float(np.exp(-abs(rng.normal(0.0, param))))
    raise ValueError(f"unknown speed-profile {profile!r}")


def slowdown_s(compute_s: float, steps: int, speed: float, step_time_s: float = 0.0) -> float:
    """Extra wait so that a solve of ``compute_s`` seconds and ``steps`` local steps takes
    (compute_s + steps * step_time_s) / speed in all."""
    return compute_s * (1.0 / speed - 1.0) + steps * step_time_s / speed


def draw_fault(seed: int, round_idx: int, pid: int, crash: float, hang: float, corrupt: float) -> str | None:
    """'crash', 'hang', 'corrupt:<kind>' or None for client ``pid`` in round ``round_idx``."""
    if crash == hang == corrupt == 0:
        return None
    rng = np.random.default_rng(seed_sequence(seed, round_idx, pid, STREAM_FAULT))
    u = rng.random()
    if u < crash:
        return "crash"
    if u < crash + hang:
        return "hang"
    if u < crash + hang + corrupt:
        return "corrupt:" + CORRUPTIONS[int(rng.integers(len(CORRUPTIONS)))]
    return None


def corrupt(arrays: list[np.ndarray], kind: str) -> list[np.ndarray]:
    """A reply spoiled in one of the ways the server must catch."""
    out = [np.array(a, dtype=np.float64, copy=True) for a in arrays]
    if not out:
        return out
    if kind == "nan":
        out[0].flat[0] = np.nan
    elif kind == "inf":
        out[0].flat[-1] = np.inf
    elif kind == "shape":
        out[0] = out[0].reshape(-1)[:-1]
    elif kind == "huge":
        out[0] = out[0] + 1e12
    else:
        raise ValueError(f"unknown corruption {kind!r}")
    return out
