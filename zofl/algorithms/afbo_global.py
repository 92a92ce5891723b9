"""afbo-global (ours, beyond paper 002): asynchronous federated bilevel optimization with FedNest's
*global* Neumann series, run on a shared vector. The mathematics, Flower-free (pure numpy).

Problem (paper 002, eq. 1): min_x Phi(x) = (1/m) sum_i f_i(x, y*(x)), y*(x) = argmin_y g(x, y),
g = (1/m) sum_i g_i. With H = (1/m) sum_i H_i, H_i = grad^2_yy g_i, J_i = grad^2_xy g_i (p x q) and
b = (1/m) sum_i grad_y f_i, the hyper-gradient (eq. 2) is

    grad Phi = (1/m) sum_i grad_x f_i - ((1/m) sum_i J_i) H^{-1} b                          (G)

AFBO averages every client's *own* estimate, (1/m) sum_i (grad_x f_i - J_i H_i^{-1} grad_y f_i)
(``local_average_hypergradient``): the mean of products is not the product of means, so its zero
is not x* when the clients' Jacobians or Hessians differ (tests/test_afbo.py). Here the inverse-
Hessian-vector product is global, as in FedNest's FedIHGP, and every client's contribution is
*linear* in one shared vector v held by the server:

    r_i = H_i v - grad_y f_i          (client i's residual of the linear system H v = b)     (R)
    v  <- v - (1/l) (1/m) sum_i r_i   (a Neumann / Richardson step on the shared v)          (N)
    q_i = grad_x f_i - J_i v          (client i's hyper-gradient piece with the shared v)    (Q)
    x  <- x - eta (1/m) sum_i q_i                                                           (X)
    y  <- y - beta (1/m) sum_i G_i    (AFBO's inner step, Algorithm 1 line 10)              (Y)

with the newest stored r_i, q_i, G_i of every client, whatever v, x, y they were computed on
(asynchrony). From v = 0 with fresh products, k steps of (N) give v_k = (1/l) sum_{j<k} (I - H/l)^j b,
FedNest's truncated series exactly; kept across outer rounds (warm start) v is the running iterate.
Fixed point: when the stored values are those of the current (x, y, v), (Y) stops where
sum_i G_i = 0, i.e. grad_y g = 0 (one local step; y = y*(x)); (N) stops where (1/m) sum_i H_i v = b,
i.e. v = H^{-1} b; then (X) stops where (1/m) sum_i q_i = grad_x f - J H^{-1} b = grad Phi = 0 (G):
the mean of the products is the product of the means because each q_i and r_i is linear in the one
shared v. Stale stored values perturb the iteration by at most the change of (x, y, v) over the delay.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Vec = np.ndarray


def client_residual(hvp: Callable[[Vec], Vec], grad_y_f: Vec, v: Vec) -> Vec:
    """(R): r_i = grad^2_yy g_i(x, y) v - grad_y f_i(x, y), client i's share of the residual of H v = b
    (one Hessian-vector product, never the matrix)."""
    return hvp(v) - grad_y_f


def client_hyper_piece(grad_x_f: Vec, jvp: Callable[[Vec], Vec], v: Vec) -> Vec:
    """(Q): q_i = grad_x f_i(x, y) - grad^2_xy g_i(x, y) v with the server's shared v (one Jacobian-vector
    product). The mean over clients of q_i is (G) at v = H^{-1} b."""
    return grad_x_f - jvp(v)


def neumann_step(v: Vec, mean_residual: Vec, lipschitz: float) -> Vec:
    """(N): v <- v - (1/l) mean_i r_i = (I - H/l) v + b/l with fresh r_i (l = l_{g,1} >= the largest
    eigenvalue of H, so that the iteration contracts). From v = 0, k steps give FedNest's truncated
    Neumann series (1/l) sum_{j<k} (I - H/l)^j b."""
    return v - mean_residual / lipschitz


def outer_step(x: Vec, mean_piece: Vec, eta: float) -> Vec:
    """(X): x <- x - eta mean_i q_i."""
    return x - eta * mean_piece


def inner_step(y: Vec, mean_G: Vec, beta: float) -> Vec:
    """(Y): AFBO's inner step (Algorithm 1, line 10), y <- y - beta mean_i G_i."""
    return y - beta * mean_G


def global_hypergradient(gx: list[Vec], Js: list[np.ndarray], Hs: list[np.ndarray], gys: list[Vec]) -> Vec:
    """(G) with dense matrices, for tests: mean gx_i - (mean J_i) (mean H_i)^{-1} (mean gy_i), J_i p x q."""
    J, H = np.mean(Js, axis=0), np.mean(Hs, axis=0)
    return np.mean(gx, axis=0) - J @ np.linalg.solve(H, np.mean(gys, axis=0))


def local_average_hypergradient(gx: list[Vec], Js: list[np.ndarray], Hs: list[np.ndarray],
                                gys: list[Vec]) -> Vec:
    """AFBO's limit with exact local solves, for tests: mean_i (gx_i - J_i H_i^{-1} gy_i)."""
    return np.mean([g - J @ np.linalg.solve(H, gy) for g, J, H, gy in zip(gx, Js, Hs, gys)], axis=0)


def delay_mean(step: int, versions: np.ndarray, have: np.ndarray) -> float:
    """Mean age (server steps) of the stored values in use, over the clients heard from (0 if none)."""
    return float((step - versions[have]).mean()) if have.any() else 0.0
