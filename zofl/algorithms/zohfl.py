"""ZO-HFL (paper 003, Algorithms 1 and 2) as pure functions: no Flower here.

Problem (1):  min_x f(x) = f1(x) + (1/m) sum_i f2(x, y_i(x)),
              y_i(x) = argmin_{y in Y_i(x)} h_i(x, y).

Names, defined once:

* ``x``      -- the server's global model (flattened, length n).
* ``f1``     -- the server's loss on the server's own data.
* ``f2``     -- the server/client gap penalty, f2(x, y) = (lambda / 2) ||x - y||^2 (Sec. IV).
* ``lam``    -- lambda, the weight of that penalty.
* ``h_i``    -- client i's lower-level objective, loss_i(y) + (mu / 2) ||x - y||^2.
* ``mu``     -- the proximal weight of the lower level (strong convexity of h_i).
* ``eta``    -- smoothing radius of the zeroth-order estimate.
* ``gamma``  -- server step; gamma_r = gamma / sqrt(r + 1) in the experiments.
* ``lr0``    -- g~ (gamma tilde), the client's step lr0 / (t + 1).
* ``H``      -- local steps H_{i,r} of one lower-level solve.
* ``Gamma``  -- the offset of the client step lr0 / (t + Gamma) (Proposition 1; experiments: 1).
* ``Hierarchy`` -- the problem's pieces f2, grad_y h_i and Proj_{Y_i(x)} (``default_hierarchy``:
  the paper's Sec. IV instance above; a task may give its own, see ``zofl.methods.zohfl``).
* ``k``      -- directions per client per round (the paper uses one; more average the estimate).

Round r: the server sends x_r; client i solves the lower level at x_r + eta v and at
x_r - eta v (``client_solve``), giving y+ and y-; the server forms
g = grad f1~(x_r) + sum_i w_i (n / (2 eta)) (f2(x_r + eta v, y+) - f2(x_r - eta v, y-)) v
and steps x_{r+1} = x_r - gamma_r g (``server_update``). Weights w_i: see ``client_weights``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .. import streams
from .lower_level import GradFn, minibatch_indices, project_ball
from .robust import clip_coefficients
from .smoothing import orthogonal_directions, seed_sequence, sphere_directions, two_point_coefficients

# Streams of the per-(seed, round, client) seed sequences; fixed so runs are reproducible.
STREAM_DIRECTIONS = streams.DIRECTIONS
STREAM_BATCHES = streams.BATCHES
STREAM_SAMPLING = streams.SAMPLING
STREAM_SERVER_BATCH = streams.SERVER_BATCH


def f2_penalty(x: np.ndarray, y: np.ndarray, lam: float) -> float:
    """f2(x, y) = (lambda / 2) ||x - y||^2 (Sec. IV, per client; weights are applied by the server)."""
    d = x - y
    return 0.5 * lam * float(d @ d)


def client_directions(seed: int, round_idx: int, pid: int, k: int, n: int, orthogonal: bool = False) -> np.ndarray:
    """v_{i,r}: the k unit directions of client ``pid`` at round ``round_idx``, from seeds alone:
    independent (the paper's k = 1), or orthonormal (``orthogonal``, ours)."""
    draw = orthogonal_directions if orthogonal else sphere_directions
    return draw(seed_sequence(seed, round_idx, pid, STREAM_DIRECTIONS), k, n)


@dataclass(frozen=True)
class Hierarchy:
    """Problem (1)'s pieces one client (and, for f2, the server) needs, for any hierarchical problem.

    * ``f2(x, y) -> float``          -- the upper coupling term f2(x, y_i).
    * ``lower_grad(x, y, idx)``      -- a stochastic gradient of h_i(x, .) at y on minibatch ``idx``.
    * ``project(x, y) -> y``         -- the projection onto Y_i(x) (may work in place on y).
    """

    f2: Callable[[np.ndarray, np.ndarray], float]
    lower_grad: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    project: Callable[[np.ndarray, np.ndarray], np.ndarray]


def default_hierarchy(loss_grad: GradFn | None, lam: float, mu: float, radius: float) -> Hierarchy:
    """The paper's instance (Sec. IV): f2 = (lambda/2)||x - y||^2, h_i = loss_i(y) + (mu/2)||x - y||^2,
    Y_i(x) = the ball of ``radius`` around x (0: R^n). ``loss_grad`` may be None on the server."""

    def lower_grad(x, y, idx):
        g = loss_grad(y, idx)
        if mu:
            g += mu * (y - x)
        return g

    return Hierarchy(lambda x, y: f2_penalty(x, y, lam), lower_grad, lambda x, y: project_ball(y, x, radius))


def lower_sgd(hier: Hierarchy, x: np.ndarray, y0: np.ndarray, batches: np.ndarray, lr0: float,
              Gamma: float = 1.0) -> np.ndarray:
    """Algorithm 2: ``len(batches)`` steps of y <- Proj_{Y_i(x)}[y - lr0 / (t + Gamma) grad_y h_i(x, y; zeta_t)]
    from Proj(y0); returns the last iterate y_H. (With the default hierarchy this is
    ``lower_level.projected_sgd``, number for number.)"""
    y = hier.project(x, np.array(y0, dtype=np.float64, copy=True))
    for t, idx in enumerate(batches):
        g = hier.lower_grad(x, y, idx)
        y -= (lr0 / (t + Gamma)) * g
        y = hier.project(x, y)
    return y


@dataclass(frozen=True)
class SolveSpec:
    """What one client needs to run Algorithm 2 twice per direction."""

    eta: float
    lam: float
    mu: float
    lr0: float
    batch_size: int
    radius: float = 0.0  # ball Y_i(x) radius; 0 = unconstrained
    crn: bool = True  # common random numbers: the + and - solves share their minibatches
    Gamma: float = 1.0  # the client step lr0 / (t + Gamma)


@dataclass
class ClientResult:
    f_plus: np.ndarray  # (k,) f2(x + eta v_j, y+_j)
    f_minus: np.ndarray  # (k,) f2(x - eta v_j, y-_j)
    y_plus: np.ndarray  # (k, n)
    y_minus: np.ndarray  # (k, n)
    steps: int  # SGD steps taken in all


def client_solve(
    hier: Hierarchy,
    num_examples: int,
    x: np.ndarray,
    directions: np.ndarray,
    H: int,
    spec: SolveSpec,
    batch_seed: tuple[int, ...],
) -> ClientResult:
    """Algorithm 2, called twice per direction v_j: at x + eta v_j and at x - eta v_j, on the problem
    ``hier`` (``default_hierarchy`` for the paper's).

    The start point y_0 is the query point itself (our choice; the paper leaves y_0 open).
    H = 0 (a straggler) gives f2 values of exactly 0, for any problem: with the paper's
    instance they are 0 anyway (y = x +- eta v), but a task's own f2 or Y_i(x) would give
    f2(x +- eta v, Proj(x +- eta v)), a term that varies with x and comes from no lower-level
    step at all; a straggler adds nothing to the server's estimate (the server does the
    same with uploaded vectors, ``straggler_f2_values``). ``batch_seed`` words seed the
    minibatch draws; with ``spec.crn`` both solves of a direction use the same draws.
    """
    k, n = directions.shape
    f_plus = np.zeros(k)
    f_minus = np.zeros(k)
    y_plus = np.empty((k, n))
    y_minus = np.empty((k, n))
    for j in range(k):
        x_p = x + spec.eta * directions[j]
        x_m = x - spec.eta * directions[j]
        b_p = minibatch_indices(seed_sequence(*batch_seed, j, 0), num_examples, H, spec.batch_size)
        b_m = b_p if spec.crn else minibatch_indices(seed_sequence(*batch_seed, j, 1), num_examples, H, spec.batch_size)
        y_plus[j] = lower_sgd(hier, x_p, x_p, b_p, spec.lr0, spec.Gamma)
        y_minus[j] = lower_sgd(hier, x_m, x_m, b_m, spec.lr0, spec.Gamma)
        if H > 0:  # H = 0: the f2 values stay 0 (see above)
            f_plus[j] = hier.f2(x_p, y_plus[j])
            f_minus[j] = hier.f2(x_m, y_minus[j])
    return ClientResult(f_plus, f_minus, y_plus, y_minus, steps=2 * k * H)


def straggler_f2_values(k: int) -> tuple[np.ndarray, np.ndarray]:
    """f2(x +- eta v_j, y+-_j) of a client with H = 0: exactly 0 for every problem, so its
    two-point coefficients are 0 and it adds nothing (a client not sampled counts the same)."""
    return np.zeros(k), np.zeros(k)


def f2_values_from_vectors(
    x: np.ndarray, directions: np.ndarray, y_plus: np.ndarray, y_minus: np.ndarray, eta: float,
    f2: Callable[[np.ndarray, np.ndarray], float],
) -> tuple[np.ndarray, np.ndarray]:
    """The server's side of the paper's uplink: f2(x +- eta v_j, y+-_j) from the uploaded y vectors.

    Uses the same arithmetic as ``client_solve``, so both uplink modes give identical numbers.
    """
    k = directions.shape[0]
    f_plus = np.array([f2(x + eta * directions[j], y_plus[j]) for j in range(k)])
    f_minus = np.array([f2(x - eta * directions[j], y_minus[j]) for j in range(k)])
    return f_plus, f_minus


WEIGHTINGS = ("uniform", "participants", "rho")


def client_weights(mode: str, pids: list[int], m: int, num_examples: Mapping[int, int],
                   n_train: int) -> dict[int, float]:
    """w_i for the clients ``pids`` that reported this round.

    * ``uniform``      -- 1/m, Algorithm 1's (1/m) sum_i; a client not sampled counts as H = 0,
      which adds exactly 0 (``client_solve``, ``straggler_f2_values``), so the reporting clients
      just get 1/m.
    * ``participants`` -- 1/|S_r|: the average over the clients that reported (our option).
    * ``rho``          -- rho_i = N_i / N_train, the experiments' f2 = (lambda/2) sum_i rho_i ||x - y_i||^2.
    """
    if mode == "uniform":
        return {p: 1.0 / m for p in pids}
    if mode == "participants":
        return {p: 1.0 / len(pids) for p in pids} if pids else {}
    if mode == "rho":
        return {p: num_examples[p] / n_train for p in pids}
    raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {mode!r}")


def zo_estimate(
    weights: Mapping[int, float],
    f_values: Mapping[int, tuple[np.ndarray, np.ndarray]],
    directions: Mapping[int, np.ndarray],
    eta: float,
    n: int,
    combine: Callable[[list[np.ndarray]], np.ndarray] | None = None,
    clip: float = 0.0,
) -> np.ndarray:
    """sum_i w_i * mean_j (n / (2 eta)) (f+_{ij} - f-_{ij}) v_{ij}: the f2 part of g (Alg. 1, line 7).

    Ours, against hostile clients (``zofl.algorithms.robust``): ``clip`` > 0 clips every coefficient
    to +-clip x the round's median magnitude; ``combine`` (a robust rule) replaces the weighted sum
    of the contributions u_i = mean_j c_ij v_ij by combine([u_i]) x sum_i w_i."""
    coefs = clip_coefficients({pid: two_point_coefficients(*f_values[pid], n, eta) for pid in weights}, clip)
    if combine is not None:
        if not weights:
            return np.zeros(n)
        u = [(coefs[pid] @ directions[pid]) / directions[pid].shape[0] for pid in weights]
        return combine(u) * float(sum(weights.values()))
    g = np.zeros(n)
    for pid, w in weights.items():
        v = directions[pid]
        g += w * (coefs[pid] @ v) / v.shape[0]
    return g


def envelope_estimate(weights: Mapping[int, float], ys: Mapping[int, np.ndarray], x: np.ndarray,
                      lam: float, combine: Callable[[list[np.ndarray]], np.ndarray] | None = None) -> np.ndarray:
    """sum_i w_i lambda (x - y_i(x)): a first-order estimate in place of the f2 part (ours, beyond the paper).

    With f2 = (lambda/2)||x - y||^2, h_i = loss_i(y) + (mu/2)||x - y||^2 and Y_i(x) = R^n, y_i(x) is
    the proximal point of loss_i / mu at x, and mu (x - y_i(x)) is the gradient of client i's Moreau
    envelope M_i(x) = min_y h_i(x, y). So with the uniform weights 1/m the server's step follows
    the gradient of

        f1(x) + (lambda / mu) (1/m) sum_i M_i(x),

    a different objective from problem (1)'s f1(x) + (1/m) sum_i (lambda/2)||x - y_i(x)||^2, whose
    gradient is lambda (I - dy_i/dx)(x - y_i): the estimate drops the term through dy_i/dx, and the
    iterates go to the stationary point of the envelope objective, not to problem (1)'s. y_i(x) is
    H SGD steps from x (inexact, as in the two-point estimate).

    Why it should be less noisy: no random direction and no n / (2 eta) factor. That is argued from
    its form, not measured (docs/zohfl.md reports accuracy only). Cost: one solve of H steps per
    client (half the two-point estimate's), and an upload of y_i, n floats per client per round
    (the two-point estimate with uplink = scalars sends 2 floats per direction).

    Only for the paper's instance with Y_i(x) = R^n: with a ball Y_i(x) = {||y - x|| <= rho} that
    binds, the gradient of M_i is (mu + nu_i)(x - y_i) with nu_i >= 0 the constraint's multiplier,
    so lambda (x - y_i) is the envelope's gradient times lambda / (mu + nu_i), a factor that changes
    per client and per round: the gradient of no fixed objective (``zofl.config`` refuses
    ball-radius > 0 with it; ``zofl.methods.zohfl.ZOHFL.check`` a task with any of the hooks, since
    with another f2, h_i or Y_i(x) the envelope reading is gone)."""
    if combine is not None:  # a robust rule over lambda (x - y_i) (ours; see zo_estimate)
        if not weights:
            return np.zeros_like(x)
        return combine([lam * (x - ys[pid]) for pid in weights]) * float(sum(weights.values()))
    g = np.zeros_like(x)
    for pid, w in weights.items():
        g += w * lam * (x - ys[pid])
    return g


def server_step_size(gamma: float, round_idx: int) -> float:
    """gamma_r = gamma / sqrt(r + 1) (Theorem 1(ii); experiments: gamma = 0.01)."""
    return gamma / math.sqrt(round_idx + 1)


def server_update(x: np.ndarray, grad_f1: np.ndarray, g_f2: np.ndarray, gamma_r: float) -> np.ndarray:
    """x_{r+1} = x_r - gamma_r (grad f1~(x_r, xi_r) + g_f2) (Alg. 1, line 8)."""
    return x - gamma_r * (grad_f1 + g_f2)
