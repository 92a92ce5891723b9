"""Robust aggregation: the server's combination of the clients' vectors when some may be hostile.

None of the papers considers hostile clients: their algorithm boxes average (``aggregation =
"mean"``, the default, which every method keeps exactly as before). The other rules are ours,
offered for every method through the run-config key ``aggregation``; each replaces the average of
the vectors the method averages (FedAvg / FedProx / FedRZO_nn: the client models; SCAFFOLD and
FedBuff: Delta y, and SCAFFOLD's Delta c; FedRZO_bl and FedNest: each averaged quantity; AFBO: the
stored updates; ZO-HFL: each client's contribution c_i v_i / k to the zeroth-order estimate):

* ``median``: the coordinate-wise median (Yin et al., ICML 2018);
* ``trimmed-mean``: the coordinate-wise mean after dropping the ``trim-fraction`` largest and
  smallest values of each coordinate (Yin et al. 2018);
* ``krum``: the one vector whose squared distances to its n - f - 2 nearest others sum least,
  f = ``krum-f`` (Blanchard et al., NeurIPS 2017).

Each rule is the same computation as Flower's ``aggregate_median``, ``aggregate_trimmed_avg`` and
``aggregate_krum`` (flwr.server.strategy.aggregate), equal to them bit for bit
(tests/test_robust.py compares them). They are written here, a few numpy lines each, because this
module is part of the Flower-free core that the in-process engine runs without importing Flower
(tests/test_layers.py); importing Flower's module would load all of ``flwr.server``.

The robust rules ignore the weights (as Flower's do) and are scaled by the weights' sum, so that a
method whose weights do not sum to 1 (ZO-HFL's 1/m over |S_r| < m clients) keeps its scale.

For the zeroth-order methods the clients' *coefficients* can also be clipped (``coef-clip`` = kappa
> 0): each two-point coefficient is clipped to +-kappa x the round's median coefficient magnitude,
so that one client's huge f-value difference cannot dominate the estimate (``clip_coefficients``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

RULES = ("mean", "median", "trimmed-mean", "krum")


def robust_combine(vectors: Sequence[np.ndarray], rule: str, trim: float = 0.2, krum_f: int = 1,
                   weights: Sequence[float] | None = None) -> np.ndarray:
    """The ``rule`` combination of ``vectors`` (all of one shape), times sum(weights) if given;
    ``rule = "mean"`` is the plain (or weighted) mean."""
    if not len(vectors):
        raise ValueError("robust_combine: no vectors")
    scale = 1.0 if weights is None else float(np.sum(weights))
    if rule == "mean":
        if weights is None:
            return np.mean(vectors, axis=0)
        w = np.asarray(weights, dtype=np.float64)
        return np.tensordot(w, np.stack(vectors), axes=1)
    stacked = np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
    if rule == "median":
        out = np.median(stacked, axis=0)
    elif rule == "trimmed-mean":
        out = trimmed_mean(stacked, trim)
    elif rule == "krum":
        out = stacked[krum_index(stacked, krum_f)].copy()
    else:
        raise ValueError(f"aggregation must be one of {RULES}, got {rule!r}")
    return out * scale if scale != 1.0 else out


def trimmed_mean(stacked: np.ndarray, trim: float) -> np.ndarray:
    """Mean over axis 0 after dropping the int(trim * n) smallest and largest values per coordinate
    (scipy's ``trim_mean``, as Flower's ``_trim_mean``)."""
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim-fraction must be in [0, 0.5), got {trim}")
    n = stacked.shape[0]
    low = int(trim * n)
    part = np.partition(stacked, (low, n - low - 1), axis=0)
    return np.mean(part[low:n - low], axis=0)


def krum_index(stacked: np.ndarray, f: int) -> int:
    """Krum's choice: the row whose summed squared distances to its max(1, n - f - 2) nearest other
    rows are smallest (the first such row on ties, as Flower's ``aggregate_krum``)."""
    flat = stacked.reshape(len(stacked), -1)
    d2 = np.array([[np.linalg.norm(a - b) ** 2 for b in flat] for a in flat])
    k = max(1, len(flat) - f - 2)
    scores = [np.sum(row[np.argsort(row)[1:k + 1]]) for row in d2]
    return int(np.argmin(scores))


def clip_coefficients(coefs: dict[int, np.ndarray], kappa: float) -> dict[int, np.ndarray]:
    """Each client's two-point coefficients clipped to +-kappa x the median |coefficient| of the
    round (over all clients and directions); kappa = 0 leaves them as they are."""
    if kappa <= 0 or not coefs:
        return coefs
    bound = kappa * float(np.median(np.abs(np.concatenate([np.ravel(c) for c in coefs.values()]))))
    return {pid: np.clip(c, -bound, bound) for pid, c in coefs.items()}


def combine_with(rule, vectors: Sequence[np.ndarray], weights: Sequence[float] | None = None) -> np.ndarray:
    """``robust_combine`` with a rule's ``aggregation``, ``trim_fraction`` and ``krum_f`` (``zofl.settings.Robust``)."""
    return robust_combine(vectors, rule.aggregation, rule.trim_fraction, rule.krum_f, weights)
