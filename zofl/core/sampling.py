"""Who takes part: S_r and the stragglers (synchronous rounds), availability, leaves and local work
per client (asynchronous tasks; availability and leaves also FedNest's rounds). Pure functions of
seeds."""
from __future__ import annotations

import numpy as np

from .. import streams
from ..algorithms.smoothing import seed_sequence
from ..settings import MIN_AVAILABILITY

STREAM_SAMPLING = streams.SAMPLING
STREAM_AVAILABILITY = streams.AVAILABILITY


def round_size(beta: float, m: int) -> int:
    """|S_r| = max(1, round(beta m)): how many clients a synchronous round samples."""
    return max(1, int(round(beta * m)))


def sample_round(seed: int, round_idx: int, m: int, beta: float, straggler_prob: float) -> tuple[list[int], list[int]]:
    """(S_r, stragglers): ``round_size(beta, m)`` client ids drawn without replacement, and the
    subset marked as stragglers (each with probability ``straggler_prob``)."""
    rng = np.random.default_rng(seed_sequence(seed, round_idx, STREAM_SAMPLING))
    k = round_size(beta, m)
    sampled = sorted(int(i) for i in rng.choice(m, size=k, replace=False))
    stragglers = [i for i in sampled if rng.random() < straggler_prob]
    return sampled, stragglers


def per_client(values: str, pid: int) -> float:
    """Client ``pid``'s entry of a comma list (entry pid mod k): ``availability``, ``local-work``."""
    items = values.split(",")
    return float(items[pid % len(items)])


def available(seed: int, task: int, pid: int, prob: float) -> bool:
    """Whether client ``pid`` takes part in asynchronous task number ``task`` (probability ``prob``).

    A client that sits a task out is offered another one later (the engine's rejoin), so ``prob``
    below ``MIN_AVAILABILITY`` (0: never) would keep the engine drawing forever without an update:
    refused here too, for callers that bypass ``parse_config`` (which refuses it before any work)."""
    if not MIN_AVAILABILITY <= prob:  # also NaN
        raise ValueError(f"availability {prob!r} of client {pid} is below {MIN_AVAILABILITY} (run-config "
                         f"'availability'): the client would sit out about 1/p tasks per task it takes")
    if prob >= 1.0:
        return True
    return bool(np.random.default_rng(seed_sequence(seed, task, pid, STREAM_AVAILABILITY)).random() < prob)


def parse_leave(spec: str) -> dict[int, list[tuple[int, int]]]:
    """``leave`` = "client:start:length,...": {client: [(start, end)]}, away for start <= v < end.
    Raises ValueError on anything else (``zofl.config`` refuses it before any work)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for item in (t.strip() for t in spec.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"leave entry {item!r} is not client:start:length (three integers >= 0)")
        pid, start, length = (int(p) for p in parts)
        if length < 1:
            raise ValueError(f"leave entry {item!r}: the length must be at least 1")
        out.setdefault(pid, []).append((start, start + length))
    return out


def away(leave: dict[int, list[tuple[int, int]]], pid: int, v: int) -> bool:
    """Whether client ``pid`` has left at ``v`` (asynchronous: the model version, i.e. server steps
    taken; FedNest: the communication round): start <= v < start + length for one of its stretches."""
    return any(start <= v < end for start, end in leave.get(pid, ()))


def round_available(seed: int, r: int, sampled: list[int], availability: str,
                    leave: dict[int, list[tuple[int, int]]]) -> list[int]:
    """The sampled clients of synchronous round ``r`` that are there: not on leave at r, and drawn
    available with their ``availability`` p_i (the asynchronous engine's draw, with the round for the
    task number). The others are not contacted (no work, no failure)."""
    return [p for p in sampled if not away(leave, p, r) and available(seed, r, p, per_client(availability, p))]


def client_local_steps(H: int, multiplier: float) -> int:
    """E_i = round(multiplier_i H), at least 1 when H > 0: variable local work per client."""
    return 0 if H == 0 else max(1, int(round(multiplier * H)))
