"""First-order baselines as pure functions: FedAvg, FedProx and SCAFFOLD local training.

Names, defined once:
* ``x``      -- the global model; ``y`` a client's local iterate.
* ``lr``     -- the client step (run-config ``local-lr``), scheduled by ``local_lr``.
* ``K``      -- local steps per round; the harness uses K = 2 H_{i,r}, the number of SGD steps
  a ZO-HFL client takes in its two lower-level solves, so every method does the same local work.
* ``prox_mu``-- FedProx's proximal weight: local objective loss_i(y) + (prox_mu / 2) ||y - x||^2
  (Li et al., 2020).
* ``c``, ``c_i`` -- SCAFFOLD's server and client control variates (Karimireddy et al., 2020,
  Algorithm 1 with option II for the client update).
"""
from __future__ import annotations

import math

import numpy as np

from .lower_level import GradFn

LR_SCHEDULES = ("constant", "round-sqrt", "step")


def local_lrs(kind: str, lr: float, round_idx: int, steps: int) -> np.ndarray:
    """Step sizes of one round's K local steps.

    constant: lr; round-sqrt: lr / sqrt(r + 1) (decays over rounds); step: lr / (t + 1) within the
    round, as ZO-HFL's lower-level solver."""
    if kind == "constant":
        return np.full(steps, lr)
    if kind == "round-sqrt":
        return np.full(steps, lr / math.sqrt(round_idx + 1))
    if kind == "step":
        return lr / (np.arange(steps) + 1.0)
    raise ValueError(f"local-lr-schedule must be one of {LR_SCHEDULES}, got {kind!r}")


def local_sgd(grad: GradFn, x: np.ndarray, batches: np.ndarray, lrs: np.ndarray, prox_mu: float = 0.0,
              correction: np.ndarray | None = None) -> np.ndarray:
    """K = len(batches) steps of y <- y - lr_t (grad loss(y; batch_t) + prox_mu (y - x) + correction), y_0 = x.

    FedAvg: prox_mu = 0, no correction. FedProx: prox_mu > 0. SCAFFOLD: correction = c - c_i.
    """
    y = np.array(x, dtype=np.float64, copy=True)
    for idx, lr in zip(batches, lrs):
        g = grad(y, idx)
        if prox_mu:
            g += prox_mu * (y - x)
        if correction is not None:
            g += correction
        y -= lr * g
    return y


def weighted_mean(vectors: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """sum_i w_i v_i / sum_i w_i (FedAvg aggregation with w_i = N_i)."""
    w = np.asarray(weights, dtype=np.float64)
    return np.tensordot(w / w.sum(), np.stack(vectors), axes=1)


def scaffold_client_control(c_i: np.ndarray, c: np.ndarray, x: np.ndarray, y: np.ndarray,
                            lr_sum: float) -> np.ndarray:
    """Option II: c_i+ = c_i - c + (x - y) / (K lr); with varying steps, K lr = sum of the steps."""
    if lr_sum <= 0:
        return c_i.copy()  # no step taken: nothing learned about the client's drift
    return c_i - c + (x - y) / lr_sum


def scaffold_server_update(x: np.ndarray, c: np.ndarray, dys: list[np.ndarray], dcs: list[np.ndarray],
                           server_lr: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """x <- x + lr_g mean_S(Delta y); c <- c + (|S| / m) mean_S(Delta c)."""
    if not dys:
        return x.copy(), c.copy()
    return x + server_lr * np.mean(dys, axis=0), c + (len(dcs) / m) * np.mean(dcs, axis=0)
