"""ADBO (Jiao, Yang, Wu, Song, Jian, ICLR 2023, "Asynchronous Distributed Bilevel Optimization"): the
mathematics, Flower-free, as small numpy functions.

Problem: min sum_j G_j(x, y) s.t. y = argmin_y' sum_j g_j(x, y') over N workers j (G_j = the task's f_j,
g_j = its g_j). ADBO writes it with local copies and consensus variables,

    min_{x_j, y_j, v, z} sum_j G_j(x_j, y_j)   s.t.  x_j = v,   phi(v, {y_j}, z) <= 0,

where phi measures how far (y_j, z) are from the lower-level solution at v:

    phi(v, {y_j}, z) = sum_j ||y_j - y_j^K(v)||^2 + ||z - z^K(v)||^2,

(y_j^K, z^K) being K primal-dual steps of the consensus lower problem min sum_j g_j(v, y_j), y_j = z
(``lower_worker_step`` / ``lower_master_step``). phi <= 0 is replaced by a polyhedron of cutting planes,
first-order expansions of phi at the points the run visits (``new_cut``):

    a_l^T v + sum_j b_{l,j}^T y_j + c_l^T z + kappa_l <= 0,   l = 1..|P|,

with a = grad_v phi through the K COUPLED rounds (``adjoint_*``, K reverse rounds; ours, the code
differentiates y_j's own steps only: ``unrolled_grad_v``, which biases the fixed point, docs/afbo.md),
and the resulting single-level problem is solved by primal-dual steps on its regularized Lagrangian

    L = sum_j G_j(x_j, y_j) + sum_l lam_l (a_l^T v + sum_j b_{l,j}^T y_j + c_l^T z + kappa_l)
        + sum_j theta_j^T (x_j - v) - (c1 / 2) ||lam||^2 - (c2 / 2) sum_j ||theta_j||^2,

workers descending in (x_j, y_j) (``worker_step``), the master descending in (v, z) (``master_step``)
and ascending in lam (``cut_dual_step``, projected on lam >= 0) and in the theta_j of the workers it heard
from (``consensus_dual_step``).

Where these come from. The paper itself could not be read here (only its abstract is stored); its
authors' public code (parameter server over RabbitMQ: the master of the IJCNN1 regularization experiment
and its worker) was read in full, and every update below is that code's, line for line, with the
paper's names (v, z, x_j, y_j, lam, theta, phi, c1, c2, mu, k_pre = ``pre_epochs``, S, tau). Equation
numbers of the paper are therefore not cited; docs/afbo.md, section ADBO, says which line is which.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Vec = np.ndarray


# -- the worker's primal step (the code's step_outer) ------------------------------------------------
def worker_step(grad_x_G: Vec, grad_y_G: Vec, x_j: Vec, y_j: Vec, theta_j: Vec, lam: Vec, b_j: np.ndarray,
                lr_x: float, lr_y: float) -> tuple[Vec, Vec]:
    """Worker j's gradient step on L in its own variables, both gradients at the old (x_j, y_j):

        x_j <- x_j - lr_x (grad_x G_j + theta_j),   y_j <- y_j - lr_y (grad_y G_j + sum_l lam_l b_{l,j}).

    ``lam`` (L,) and ``b_j`` (L, q) are the cuts' duals and worker j's block of the cuts (0 for empty
    slots), as the worker last received them: possibly stale."""
    return x_j - lr_x * (grad_x_G + theta_j), y_j - lr_y * (grad_y_G + lam @ b_j)


# -- the master's step (the code's main loop, after the active set Q is in) ---------------------------
def master_step(v: Vec, z: Vec, theta: np.ndarray, lam: Vec, a: np.ndarray, c: np.ndarray, lr_v: float,
                lr_z: float) -> tuple[Vec, Vec]:
    """The master's gradient step on L in the consensus variables, with every worker's theta_j (stale
    ones included):  v <- v - lr_v (-sum_j theta_j + sum_l lam_l a_l),   z <- z - lr_z sum_l lam_l c_l."""
    return v - lr_v * (lam @ a - theta.sum(axis=0)), z - lr_z * (lam @ c)


def cut_values(a: np.ndarray, b: np.ndarray, c: np.ndarray, kappa: Vec, v: Vec, ys: np.ndarray, z: Vec) -> Vec:
    """a_l^T v + sum_j b_{l,j}^T y_j + c_l^T z + kappa_l for every cut l (> 0: the cut is violated)."""
    return a @ v + np.einsum("ljq,jq->l", b, ys) + c @ z + kappa


def cut_dual_step(lam: Vec, on: np.ndarray, values: Vec, lr: float, reg: float) -> Vec:
    """Projected ascent on the cuts' duals with the new v, z and the stored y_j:
    lam_l <- max(0, lam_l + lr (value_l - c1 lam_l)); empty slots stay 0."""
    return np.where(on, np.maximum(0.0, lam + lr * (values - reg * lam)), 0.0)


def consensus_dual_step(theta: np.ndarray, xs: np.ndarray, v: Vec, active: np.ndarray, lr: float,
                        reg: float) -> np.ndarray:
    """Ascent on theta_j for the workers of the active set Q only (the new v, the x_j they sent):
    theta_j <- theta_j + lr (x_j - v - c2 theta_j)."""
    step = theta + lr * (xs - v - reg * theta)
    return np.where(active[:, None], step, theta)


def may_update(n_active: int, delays: np.ndarray, S: int, tau: int) -> bool:
    """The master's rule for an update: at least S workers in the active set and no worker's last update
    tau or more master steps old (``delays``: 0 for the workers of Q; the bounded delay)."""
    return n_active >= S and int(delays.max(initial=0)) < tau


# -- the lower-level approximation (the code's step_newcp) and the cut (grad_v, new cp) ----------------
def lower_worker_step(grad_y_g: Vec, y: Vec, phi_j: Vec, z_k: Vec, mu: float, lr: float) -> Vec:
    """One step of worker j on its augmented lower Lagrangian g_j(v, y) + phi_j^T y + (mu/2)||y - z_k||^2."""
    return y - lr * (grad_y_g + phi_j + mu * (y - z_k))


def z_step_size(z_lr: float, mu: float, m: int) -> float:
    """The master's step size lr_z on z (the code's z_lr): ``z_lr`` when it is > 0, else 1 / (mu m) (1 / m when mu
    = 0). Why (ours): the lower rounds' z step (``lower_master_step``) is a gradient step on a sum over the m
    workers, so z_k's own coefficient is 1 - lr_z mu m: the rounds diverge for lr_z mu m > 2, and 1 / (mu m) sets
    the coefficient to 0, i.e. z_{k+1} = mean_j y_j + sum_j phi_j / (mu m), the exact minimiser of the z part."""
    if z_lr > 0:
        return float(z_lr)
    return 1.0 / (m * mu) if mu > 0 else 1.0 / m


def lower_master_step(z_k: Vec, ys: np.ndarray, phi: np.ndarray, mu: float, lr_z: float,
                      lr_phi: float) -> tuple[Vec, np.ndarray]:
    """The master's step of the consensus lower problem, from the workers' new y_j (all of them: the
    code runs these rounds synchronously): z <- z - lr_z (-sum_j phi_j + mu sum_j (z - y_j)),
    phi_j <- phi_j + lr_phi (y_j - z), both with the old z and phi."""
    grad_z = -phi.sum(axis=0) + mu * (len(ys) * z_k - ys.sum(axis=0))
    return z_k - lr_z * grad_z, phi + lr_phi * (ys - z_k)


def unrolled_grad_v(r: Vec, traj: list[Vec], hvp: Callable[[Vec, int], Vec], jvp: Callable[[Vec, int], Vec],
                    mu: float, lr: float) -> Vec:
    """THE AUTHORS' CODE'S cut gradient, no longer used by the Method (it holds phi_j and z_k fixed, so its d y^K/d v
    is the mu-proximal local sensitivity, not the consensus one: the cut's fixed point is then biased, 0.236 ||x*||
    on QuadraticHypergrad; the Method uses ``adjoint_*``, the full gradient).
    grad_v ||y_j - y_j^K(v)||^2 = -2 (d y^K / d v)^T r with r = y_j - y^K, by reverse mode through the
    K steps y^{k+1} = y^k - lr (grad_y g_j(v, y^k) + phi_j + mu (y^k - z_k)) that made y^K from y^0 = y_j
    (phi_j, z_k held fixed, as the code's autograd sees them). ``traj`` = [y^0, ..., y^{K-1}];
    ``hvp(w, k)`` = grad^2_yy g_j(v, y^k) w and ``jvp(w, k)`` = grad^2_xy g_j(v, y^k) w on step k's
    minibatch. Products only, never a matrix."""
    w, g = r.copy(), None
    for k in reversed(range(len(traj))):
        term = -lr * jvp(w, k)
        g = term if g is None else g + term
        w = w - lr * (hvp(w, k) + mu * w)
    return -2.0 * g if g is not None else np.zeros(0)


def adjoint_seed(ys: np.ndarray, ys_K: np.ndarray, z: Vec, z_K: Vec) -> tuple[np.ndarray, Vec, np.ndarray]:
    """Start of the reverse pass through the K coupled lower rounds (ours: the full grad_v phi, see
    ``adjoint_u``): the adjoints of y_j^K, z^K, phi_j^K for phi = sum_j ||y_j - y_j^K||^2 + ||z - z^K||^2."""
    return -2.0 * (ys - ys_K), -2.0 * (z - z_K), np.zeros_like(ys)


def adjoint_u(ybar: np.ndarray, zbar: Vec, phibar: np.ndarray, mu: float, lr_z: float, lr_phi: float) -> np.ndarray:
    """Round k of the reverse pass, master side: the total adjoint u_j of y_j^{k+1}, which enters phi_j^{k+1}
    (weight lr_phi) and z^{k+1} (weight lr_z mu) besides its own later use (``lower_master_step``)."""
    return ybar + lr_phi * phibar + lr_z * mu * zbar


def adjoint_worker(u: Vec, Hu: Vec, Ju: Vec, mu: float, lr: float) -> tuple[Vec, Vec]:
    """Worker j's part of reverse round k (``lower_worker_step`` transposed): with Hu = grad^2_yy g_j(v, y_j^k) u,
    Ju = grad^2_xy g_j(v, y_j^k) u, the adjoint of y_j^k and its term of grad_v phi."""
    return u - lr * (Hu + mu * u), -lr * Ju


def adjoint_master(zbar: Vec, phibar: np.ndarray, u: np.ndarray, mu: float, lr_y: float, lr_z: float,
                   lr_phi: float) -> tuple[Vec, np.ndarray]:
    """Master's part of reverse round k: the adjoints of z^k and phi_j^k (z^{k+1} = (1 - lr_z mu m) z^k +
    lr_z sum phi_j^k + lr_z mu sum y_j^{k+1}; phi_j^{k+1} = phi_j^k + lr_phi (y_j^{k+1} - z^k); y_j^{k+1} uses
    phi_j^k and z^k with weights -lr_y and lr_y mu)."""
    m = len(u)
    zb = (1.0 - lr_z * mu * m) * zbar - lr_phi * phibar.sum(axis=0) + lr_y * mu * u.sum(axis=0)
    return zb, phibar + lr_z * zbar - lr_y * u


def new_cut(grad_v: Vec, v: Vec, ys: np.ndarray, ys_K: np.ndarray, z: Vec, z_K: Vec, grad_y0: np.ndarray | None = None,
            grad_z0: Vec | None = None) -> tuple[Vec, np.ndarray, Vec, float]:
    """The cutting plane at the current point: phi's first-order expansion,
    a = grad_v phi (the reverse rounds' sum), b_j = 2 (y_j - y_j^K), c = 2 (z - z^K),
    kappa = phi(current) - a^T v - sum_j b_j^T y_j - c^T z; so the cut reads phi(current) + grad phi^T
    (point - current) <= 0 (no epsilon: the code has none).

    b_j and c are the code's: they hold y^K, z^K fixed, though the K rounds start from (y_j, z) themselves.
    ``grad_y0``, ``grad_z0`` (ours, ``cut-start-gradient``): the adjoints of the start point y_j^0 = y_j, z^0 = z
    that the reverse rounds end with (seeded by ``adjoint_seed``), added to b_j and c: then (a, b, c) is phi's
    full gradient. Without them the cut's normal misses the factor (I - T)^T, T = d(y^K, z^K)/d(y^0, z^0), and
    the method's fixed point is biased by O(||T||) (docs/afbo.md, "ADBO")."""
    b, c = 2.0 * (ys - ys_K), 2.0 * (z - z_K)
    phi = float(np.sum((ys - ys_K) ** 2) + np.sum((z - z_K) ** 2))
    if grad_y0 is not None:
        b = b + grad_y0
    if grad_z0 is not None:
        c = c + grad_z0
    kappa = phi - float(grad_v @ v) - float(np.sum(b * ys)) - float(c @ z)
    return grad_v, b, c, kappa


# -- the cut set: fixed slots, so that a checkpoint has fixed shapes --------------------------------
def drop_inactive(lam: Vec, on: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """The code's active-set rule, run when a cut is about to be added: a cut whose dual is below ``tol``
    (it has not been binding) is removed. Returns the new ``on`` mask."""
    return on & (lam >= tol)


def free_slot(lam: Vec, on: np.ndarray) -> int:
    """Where the next cut goes: the first empty slot; if every slot holds a cut, the one with the smallest
    dual (ours: the code's list grows without bound)."""
    empty = np.flatnonzero(~on)
    return int(empty[0]) if len(empty) else int(np.argmin(lam))
