"""Replies far outside their round's spread: a diagnostic, never a defence.

Under the papers' ``aggregation = "mean"`` one hostile client can move the model as far as it likes
(docs/results/poisoning: one ``large`` client of 10 takes ZO-HFL's final accuracy from 63.0% to 12.8%,
FedAvg's from 92.0% to 6.5%), while the robust rules (``zofl.algorithms.robust``) hold if chosen. Users
do not choose them unless told: the engines flag, per round (or per asynchronous buffer), the replies
that lie far from the others (``far_replies``), the round record lists them (``outliers``) and the
summary counts them, and warns under the mean when one client keeps being flagged
(``zofl.core.summary``). Nothing here changes a reply, a weight or an aggregate: the numbers of a run
are those without it. Its cost per round, O(replies x dimension), vectorised: 22 to 43 ms for 100 replies of
7,850 values, 0.22 to 0.34 s for 1,000 (benchmarks/bench_outliers.py, docs/benchmark-scale.md).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

#: a reply is far when its distance to the round's median reply exceeds FAR x the round's scale
FAR = 10.0
#: the scale is at least SIZE_FLOOR x the median size of the round's updates (see ``far_replies``)
SIZE_FLOOR = 0.5


def update_vector(reply: Mapping[str, np.ndarray], sent: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """A reply as one float vector: its arrays flattened in order, each minus the array sent under the same
    name and shape (a model: its update), else as it is (deltas, two-point values): the reading of an update
    that ``zofl.faults.hostile_reply`` attacks."""
    parts = []
    for name, a in reply.items():
        a = np.asarray(a, dtype=np.float64)
        base = None if sent is None else sent.get(name)
        if base is not None and np.shape(base) == a.shape:
            a = a - np.asarray(base, dtype=np.float64)
        parts.append(a.ravel())
    return np.concatenate(parts) if parts else np.zeros(0)


def far_replies(replies: Sequence[Mapping[str, np.ndarray]], sent: Sequence[Mapping[str, np.ndarray] | None] = (),
                far: float = FAR, size_floor: float = SIZE_FLOOR) -> list[int]:
    """The positions (ascending) of the replies that lie far outside the spread of a round's (or an
    asynchronous buffer's) accepted ``replies`` (named arrays each; ``sent``, if given: the arrays each
    reply's client was sent, to read model replies as updates, ``update_vector``).

    Replies are compared within groups of one layout (array names and shapes; AFBO buffers two kinds);
    a group of fewer than 3 says nothing (of two replies neither is the odd one). In a group, u_i is
    reply i's update vector, c the coordinate-wise median of the u_i and d_i = ||u_i - c||. Reply i
    is flagged when

        d_i > far x s,   s = max(median of the positive d_j,  size_floor x median_j ||u_j||).

    Why this statistic: the coordinate-wise median reply is the centre a majority of honest clients
    fixes (one hostile reply cannot move it far), and the distance to it is what a reply would move
    the mean by (times 1/n), i.e. the harm ``aggregation = "mean"`` lets through. A ratio to the
    round's typical distance is free of units and of the task's scale, so one constant serves every
    method. The median is taken over the *positive* distances, since replies equal to the centre
    (stragglers' empty updates: ZO-HFL's zero two-point values, FedAvg's unchanged model) tell nothing
    of the spread and would make it 0; a median/MAD z-score of the d_i was rejected for that reason:
    its MAD is 0 or tiny whenever most clients agree closely, and then any honest difference is "far".

    What is compared is the reply as the server receives it: ZO-HFL's (f+, f-) per direction (uplink =
    scalars; not the coefficient f+ - f-, which a ``large`` reply of random signs makes 0 half the time)
    or its y+- (vectors) or y (envelope); FedAvg's, FedProx's and FedRZO_nn's model minus the x_r sent;
    SCAFFOLD's (Delta y, Delta c); FedBuff's Delta y; AFBO's G or H; FedNest's and FedRZO_bl's arrays.

    False positives on honest heterogeneous clients: non-IID clients are not a Gaussian cloud but a
    few tight clusters and some persistent odd ones (a client with other labels has another f2
    level; a straggler's empty update), so a tight cluster would make an honest odd client look far on
    spread alone (measured: 6 to 14 times in ZO-HFL rounds with stragglers at alpha = 0.1). The floor
    ``size_floor`` x the median update size keeps that from happening: a reply must then also be
    ``far x size_floor`` = 5 times the typical update's size away from the centre. Measured on honest
    runs (digits, 10 clients, alpha = 0.05, 0.1 and 1, with and without stragglers; ZO-HFL scalars,
    vectors and envelope, FedAvg, FedProx, SCAFFOLD, FedRZO_nn, FedRZO_bl, FedNest, FedBuff; 3 seeds;
    8 670 replies): the largest d_i / s was 5.9 (FedRZO_bl), 3.0 for ZO-HFL, so FAR = 10 flagged none.
    Hostile client 3 of 10 (seed 0): ``large`` (every value +-0.99 reply-max-abs) lies 1e5 to 1e7 times
    out in every round (ZO-HFL, FedAvg, FedBuff), ZO-HFL's ``scale`` x 10 12 to 18 times (every round);
    ``scale`` x 10 of a model update about 9 times (FedAvg, SCAFFOLD, FedBuff: flagged in a fifth to a half
    of its rounds). Not flagged: ``sign-flip`` (2 to 5 times), inside the spread; one such client of 10
    costs the mean at most 2.6 points (docs/results/poisoning). With fewer than 3 replies per round or
    buffer (FedBuff's default buffer-size = 2) nothing is judged. An honest client beyond 10 x the spread
    round after round would be flagged and warned of: the rules the warning points to stay correct for it."""
    return sorted(i for i, ratio in spread_ratios(replies, sent, size_floor).items() if ratio > far)


def spread_ratios(replies: Sequence[Mapping[str, np.ndarray]], sent: Sequence[Mapping[str, np.ndarray] | None] = (),
                  size_floor: float = SIZE_FLOOR) -> dict[int, float]:
    """{position: d_i / s} of ``far_replies`` for every reply that can be judged (its layout shared by at
    least 3 replies, not all equal)."""
    groups: dict[tuple, list[int]] = {}
    for i, arrays in enumerate(replies):
        layout = tuple((name, tuple(np.shape(a))) for name, a in arrays.items())
        groups.setdefault(layout, []).append(i)
    out = {}
    for idx in groups.values():
        if len(idx) < 3:
            continue
        u = np.stack([update_vector(replies[i], sent[i] if i < len(sent) else None) for i in idx])
        d = np.linalg.norm(u - np.median(u, axis=0), axis=1)
        positive = d[d > 0]
        if not len(positive):
            continue  # all replies equal
        scale = max(float(np.median(positive)), size_floor * float(np.median(np.linalg.norm(u, axis=1))))
        out.update({i: float(dist / scale) for i, dist in zip(idx, d)})
    return out
