"""AFBO (paper 002, "Anarchic Federated Bilevel Optimization"): the mathematics, Flower-free.

Problem (eq. 1): min_x Phi(x) = (1/m) sum_i f_i(x, y*(x)), y*(x) = argmin_y (1/m) sum_i g_i(x, y),
g strongly convex in y. Hyper-gradient (eq. 2):
    grad Phi = grad_x f - grad^2_xy g [grad^2_yy g]^{-1} grad_y f,
evaluated (surrogate) at (x^t, y^{t+1}).

Every function here takes oracles (closures over a client's data): ``grad_y_g(y, idx)``,
``hvp(v, idx)`` = grad^2_yy g_i(x, y; idx) v, ``jvp(v, idx)`` = grad^2_xy g_i(x, y; idx) v (an
x-sized vector), ``grad_x_f(idx)``, ``grad_y_f(idx)``; products with Hessians and Jacobians only,
never a dense matrix.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Vec = np.ndarray
APHE_MODES = ("random-depth", "sum", "printed")


def aligned_local_sgd(grad_y_g: Callable[[Vec, np.ndarray], Vec], y: Vec, batches: np.ndarray,
                      lr: float) -> tuple[Vec, Vec]:
    """Algorithm 1, lines 5-8: E = len(batches) local SGD steps y_{e+1} = y_e - lr G_e with
    G_e = grad_y g_i(x^t, y_e; xi_e), from the y the client received. Returns (G_i, y_E) where
    G_i = (1/E) sum_e G_e is the "aligned update" the client sends (the mean, so that clients with
    more local steps do not weigh more). E = 0 sends zeros."""
    acc = np.zeros_like(y)
    y = y.copy()
    for idx in batches:
        g = grad_y_g(y, idx)
        acc += g
        y -= lr * g
    return (acc / len(batches) if len(batches) else acc), y


def aphe(grad_x_f: Callable[[np.ndarray], Vec], grad_y_f: Callable[[np.ndarray], Vec],
         hvp: Callable[[Vec, np.ndarray], Vec], jvp: Callable[[Vec, np.ndarray], Vec],
         batches: list[np.ndarray], N_i: int, lipschitz: float, mode: str = "random-depth",
         rng: np.random.Generator | None = None, N: int | None = None) -> Vec:
    """APHE (Algorithm 2): H_i = d_i - W_i p, d_i = grad_x f_i, W_i = grad^2_xy g_i, and p an
    estimate of [grad^2_yy g_i]^{-1} grad_y f_i by a Neumann series in (I - grad^2_yy g_i / l)
    with l = l_{g,1} (``lipschitz``). ``batches``: minibatches for d, W, grad_y f and the N_i
    Hessian products (at least 3 + N_i of them). Three readings of the printed estimator (``mode``):

    * ``random-depth`` (default; the estimator the paper cites, Huang et al. 2023 / Ghadimi & Wang
      2018): depth n ~ U{0, ..., N_i - 1}, p = (N_i / l) prod_{j=1}^{n} (I - H_j / l) grad_y f:
      unbiased for the truncated series (1/l) sum_{j<N_i} (I - H/l)^j grad_y f, whose bias
      ~ (1 - 1/kappa)^{N_i} is the b of Theorem 1;
    * ``sum``: that truncated series itself, (1/l) sum_{j=0}^{N_i - 1} (I - H_j / l)^j grad_y f,
      one minibatch per factor (deterministic depth, N_i products);
    * ``printed``: Algorithm 2 as printed, p = (N / l) prod_{j=1}^{N_i} (I - H_j / l) grad_y f with
      N = max_i N_i (``N``), a fixed depth: for the record; it does not estimate the inverse.
    """
    if mode not in APHE_MODES:
        raise ValueError(f"unknown APHE mode {mode!r}; allowed: {APHE_MODES}")
    d = grad_x_f(batches[0])
    v = grad_y_f(batches[2])
    hess = batches[3:]
    if mode == "random-depth":
        rng = rng if rng is not None else np.random.default_rng()
        depth = int(rng.integers(N_i)) if N_i > 0 else 0
        p = (N_i / lipschitz) * v
        for j in range(depth):
            p = p - hvp(p, hess[j]) / lipschitz
    elif mode == "sum":
        term, p = v.copy(), v.copy()
        for j in range(N_i - 1):
            term = term - hvp(term, hess[j]) / lipschitz
            p += term
        p /= lipschitz
    else:
        p = ((N if N is not None else N_i) / lipschitz) * v
        for j in range(N_i):
            p = p - hvp(p, hess[j]) / lipschitz
    return d - jvp(p, batches[1])


def stored_mean(stored: np.ndarray, have: np.ndarray, average: str, combine=None) -> Vec:
    """(1/m) sum_i of the newest stored update of every client (Algorithm 1, lines 10 and 15).

    ``stored``: (m, n), row i the newest update of client i; ``have``: which rows were ever sent.
    ``average = all``: the paper's 1/m over all m clients, a client never heard from counting 0;
    ``stored``: the mean over the clients heard from (ours: the same once every client has sent
    once, Assumption 6, and no shrunken steps before that)."""
    if combine is not None:  # a robust rule over the stored updates (ours; ``zofl.algorithms.robust``)
        # over all m slots, a client never heard from counting 0 (the paper's 1/m convention) whatever
        # ``average`` says: over the clients heard from, the first steps would combine 1 or 2 updates,
        # and a robust rule over 1 or 2 vectors is their mean (one hostile first update wrecked y for good)
        return combine(list(stored))
    if average == "all":
        return stored.sum(axis=0) / len(stored)
    if not have.any():
        return np.zeros(stored.shape[1])
    return stored[have].mean(axis=0)


def neumann_term(term: Vec, h: Vec, hv: Vec, lipschitz: float) -> tuple[Vec, Vec]:
    """One more term of FedNest's truncated Neumann series (FedIHGP, one communication round): from the current
    term v_j, its product hv = H v_j with the global Hessian and the sum h of the terms so far, the next term
    v_{j+1} = v_j - hv / l and the sum h + v_{j+1}. FedNest's server (``zofl.methods.fednest``) takes one per
    round; ``neumann_hypergradient`` takes N - 1 in a row."""
    term = term - hv / lipschitz
    return term, h + term


def neumann_hypergradient(grad_x_f: Vec, jvp_of: Callable[[Vec], Vec], v: Vec, hvp_of: Callable[[Vec], Vec],
                          N: int, lipschitz: float) -> Vec:
    """grad_x f - W (1/l) sum_{j<N} (I - H/l)^j grad_y f with global (exact, averaged) products:
    FedNest's FedIHGP read as one function (each hvp_of is one communication round there, each term one
    ``neumann_term``)."""
    term, h = v, v
    for _ in range(N - 1):
        term, h = neumann_term(term, h, hvp_of(term), lipschitz)
    return grad_x_f - jvp_of(h / lipschitz)
