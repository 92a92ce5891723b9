"""Device speeds and injected faults: what makes clients slow or faulty, as pure functions of seeds.

* Device speed (``speed-profile``, ``speed-param``, ``step-time-s``): client i has a fixed speed
  factor s_i in (0, 1] drawn from (seed, i); after its real local solve of t seconds and K local
  steps it waits until t / s_i + K step-time-s / s_i have passed: its wall time is in proportion to
  its work, and slower devices miss a round deadline (``round-deadline-s``) first.
  ``uniform``: s_i ~ U(speed-param, 1); ``lognormal``: s_i = exp(-|N(0, speed-param^2)|); ``slow``:
  s_i = speed-param for the clients listed in ``slow-clients``, 1 for the others; ``none``: s_i = 1.
* Communication and stragglers on the simulated clocks (``comm-s``, ``straggler-factor``;
  ``task_delays``): per task (asynchronous: task number; synchronous: round) and client, a download
  and an upload delay, each exponential with mean ``comm-s``, and a compute multiplier; for the
  clients in ``slow-clients`` with ``straggler-factor`` = F > 1 the delays' mean is F comm-s and the
  multiplier 1 + F' Exp(1) with F' = F - 1 (mean F): their mean communication + computation time is
  F times a normal client's (the AFBO paper's stragglers, F = 5), drawn afresh for every task.
* The same delays for real (``real-delays``, where the clock is real: ``clock`` = 'wall' on the
  asynchronous engine, every synchronous engine): a client sleeps its drawn download delay before its
  solve and its upload delay after it, and stretches its solve of t seconds and K steps to
  (t + K step-time-s) x multiplier / s_i, the extra time slept ('sleep') or spent computing on its own
  thread ('compute': ``burn_cpu_s``, CPU time, so a busy machine stretches it as it would a slower
  device's solve). 'off' (the default): comm-s and straggler-factor act on the simulated clock only.
* Faults (``crash-prob``, ``hang-prob``, ``corrupt-prob``), drawn per (seed, round, client): a crash
  raises in the client; a hang sleeps ``hang-s`` seconds (past the deadline) before replying; a
  corrupt reply has NaN, Inf, a wrong shape or an absurd magnitude. The server drops all of them.
* Hostile clients (``hostile-clients``, ``attack``; ``hostile_reply``): replies that pass every check
  and are meant to harm the model; only a robust ``aggregation`` (``zofl.algorithms.robust``) limits
  them. Ours (no paper considers hostile clients).
"""
from __future__ import annotations

import time

import numpy as np

from . import streams
from .algorithms.smoothing import seed_sequence

STREAM_SPEED = streams.SPEED
STREAM_FAULT = streams.FAULT
STREAM_ATTACK = streams.ATTACK
STREAM_COMM = streams.COMM
ATTACKS = ("large", "sign-flip", "scale")
CORRUPTIONS = ("nan", "inf", "shape", "huge")  # drawn by corrupt-prob (the draw's stream fixes this list)
# replies of a wrong dtype, which any SuperNode can send through Flower's records: tests inject them by name
DTYPE_CORRUPTIONS = ("complex", "float16", "int", "bool")


class InjectedCrash(RuntimeError):
    """A client failure injected by ``crash-prob``."""


def speed_factor(seed: int, pid: int, profile: str, param: float, slow: str = "") -> float:
    """s_i in (0, 1], fixed per client by (seed, pid)."""
    if profile == "none":
        return 1.0
    if profile == "slow":
        return float(param) if pid in straggler_ids(slow) else 1.0
    rng = np.random.default_rng(seed_sequence(seed, pid, STREAM_SPEED))
    if profile == "uniform":
        return float(rng.uniform(param, 1.0))
    if profile == "lognormal":
        return float(np.exp(-abs(rng.normal(0.0, param))))
    raise ValueError(f"unknown speed-profile {profile!r}")


def slowdown_s(compute_s: float, steps: int, speed: float, step_time_s: float = 0.0, mult: float = 1.0) -> float:
    """Extra time so that a solve of ``compute_s`` seconds and ``steps`` local steps takes
    (compute_s + steps * step_time_s) * mult / speed in all (``mult``: a straggler's compute multiplier,
    ``task_delays``)."""
    return (compute_s + steps * step_time_s) * mult / speed - compute_s


def burn_cpu_s(seconds: float) -> None:
    """Compute for ``seconds`` of this thread's CPU time (``real-delays`` = 'compute': a slower device's extra
    solve time, spent computing rather than sleeping, so that it competes for the machine's cores). Element-wise
    numpy work (single-threaded, unlike a BLAS product) in slices of ~0.1 ms."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    a = np.linspace(0.0, 1.0, 2048)
    while time.thread_time() < end:
        a = np.sin(a) + 0.5


def straggler_ids(slow: str) -> set[int]:
    """The clients named in ``slow-clients``."""
    return {int(t) for t in slow.split(",") if t.strip()}


def delay_factor(pid: int, slow: str, straggler_factor: float) -> float:
    """``straggler-factor`` for a client of ``slow-clients``, 1 for the others (``task_delays``' factor)."""
    return float(straggler_factor) if pid in straggler_ids(slow) else 1.0


def task_delays(seed: int, task: int, pid: int, comm_s: float, factor: float = 1.0) -> tuple[float, float, float]:
    """(download s, upload s, compute multiplier) of client ``pid``'s task (or round) ``task`` on the
    simulated clock: the delays Exp(mean ``factor`` x ``comm_s``) each, the multiplier
    1 + (factor - 1) Exp(1) (mean ``factor``). ``factor`` is ``straggler-factor`` for a straggler, 1 for
    the others. Exponential: one parameter (the mean), memoryless, its long right tail reorders replies
    as networks do; it is the usual model of a message delay. With comm_s = 0 and factor = 1 nothing is
    drawn: (0, 0, 1), so the clock is exactly the one without communication."""
    if comm_s == 0 and factor == 1:
        return 0.0, 0.0, 1.0
    u = np.random.default_rng(seed_sequence(seed, task, pid, STREAM_COMM)).exponential(1.0, size=3)
    mean = factor * comm_s
    return float(mean * u[0]), float(mean * u[1]), float(1.0 + (factor - 1.0) * u[2])


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
    """A reply spoiled in one of the ways the server must catch (``CORRUPTIONS``, ``DTYPE_CORRUPTIONS``)."""
    out = [np.array(a, dtype=np.float64, copy=True) for a in arrays]
    if not out:
        return out
    if kind == "complex":  # the honest values plus a small imaginary part
        return [a + 1e-3j for a in out]
    if kind in DTYPE_CORRUPTIONS:  # the honest values in another dtype
        return [a.astype({"float16": np.float16, "int": np.int64, "bool": np.bool_}[kind]) for a in out]
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


def hostile_ids(spec: str) -> set[int]:
    return {int(t) for t in spec.split(",") if t.strip()}


def hostile_reply(sent: dict[str, np.ndarray], reply: dict[str, np.ndarray], attack: str, scale: float,
                  bound: float, seed: int, round_idx: int, pid: int) -> dict[str, np.ndarray]:
    """A hostile client's reply, from its honest one. Its update of an array is Delta = reply - sent
    for an array the server sent under the same name and shape (a model), else the array itself
    (deltas, two-point values, gradients):

    * ``large``: every value +-0.99 ``bound`` (bound = reply-max-abs) with random signs: the largest
      reply the server's checks let through;
    * ``sign-flip``: the update negated (sent - Delta, or -array): for ZO-HFL's two-point values
      (f+, f-) this negates the coefficient f+ - f-;
    * ``scale``: the update times ``scale`` (sent + scale Delta, or scale x array).
    """
    rng = np.random.default_rng(seed_sequence(seed, round_idx, pid, STREAM_ATTACK))
    out = {}
    for name, a in reply.items():
        a = np.asarray(a, dtype=np.float64)
        base = sent.get(name)
        base = np.asarray(base, dtype=np.float64) if base is not None and np.shape(base) == a.shape \
            else np.zeros_like(a)
        delta = a - base
        if attack == "large":
            out[name] = 0.99 * bound * rng.choice([-1.0, 1.0], size=a.shape)
        elif attack == "sign-flip":
            out[name] = base - delta
        elif attack == "scale":
            out[name] = base + scale * delta
        else:
            raise ValueError(f"attack must be one of {ATTACKS}, got {attack!r}")
    return out
