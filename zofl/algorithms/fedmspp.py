"""FedMSPP: federated minibatch stochastic proximal point (Yuan and Li, NeurIPS 2022, "On Convergence of
FedProx: Local Dissimilarity Invariant Bounds, Non-smoothness and Beyond", the minibatch stochastic
extension of FedProx that the paper analyses).

Each round every sampled client i draws ONE minibatch B_i of its data and returns an approximate solution of
the proximal subproblem at the server's model x,

    y_i ~ argmin_y  f_i(y; B_i) + (1 / (2 eta)) ||y - x||^2,

and the server averages them, x <- (1/|S|) sum_i y_i. ``eta`` is the proximal step (the inverse of a
proximal weight); the subproblem is solved here by plain gradient steps on the fixed minibatch
(``prox_solve``), whose fixed point is the exact minimiser.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .fedavg import local_sgd


def prox_grad(grad_b: Callable[[np.ndarray], np.ndarray], y: np.ndarray, x: np.ndarray, eta: float) -> np.ndarray:
    """The subproblem's gradient: grad f_i(y; B) + (y - x) / eta."""
    return grad_b(y) + (y - x) / eta


def prox_solve(grad_b: Callable[[np.ndarray], np.ndarray], x: np.ndarray, eta: float, lrs: np.ndarray) -> np.ndarray:
    """len(lrs) gradient steps y <- y - lr_t prox_grad(y) from y_0 = x on the one minibatch behind ``grad_b``
    (FedProx's local step with prox_mu = 1 / eta, every step on the same batch)."""
    return local_sgd(lambda y, _: grad_b(y), x, np.zeros((len(lrs), 0), dtype=np.int64), np.asarray(lrs),
                     prox_mu=1.0 / eta)


def server_average(ys: list[np.ndarray]) -> np.ndarray:
    """x <- (1/|S|) sum_i y_i: the paper's uniform average over the sampled clients."""
    return np.mean(np.stack(ys), axis=0)
