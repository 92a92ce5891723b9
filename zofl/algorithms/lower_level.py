"""Algorithm 2 of the ZO-HFL paper: a client's projected-SGD solve of its lower-level problem.

Pure numpy, no Flower. Notation:

* ``h_i(x, y) = loss_i(y) + (mu / 2) ||x - y||^2`` -- client i's lower-level objective
  (the paper's experiments, Sec. IV: cross-entropy plus a proximal term; ``mu`` > 0 makes
  it strongly convex in y, Assumption 1(ii)).
* ``Y_i(x) = {y : ||y - x|| <= rho}`` -- the optional ball constraint (``rho`` = radius,
  the client's "local dissimilarity bound"); ``rho = 0`` here means no constraint (R^n).
* ``H`` -- number of local steps H_{i,r}; ``H = 0`` returns the start point (a straggler).
* ``lr0`` -- g~ (gamma tilde), the step at t is ``lr0 / (t + 1)`` (experiments: 0.1 / (t + 1)).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

GradFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""grad(params, batch_indices) -> gradient of the client's loss on that minibatch (flat)."""


def local_steps(round_idx: int, tau: float, fixed: int = 0) -> int:
    """H_{i,r} = ceil(tau * sqrt(r + 1)) for 0-based round r (Theorem 1(ii)); ``fixed`` > 0 overrides."""
    if fixed > 0:
        return int(fixed)
    return int(math.ceil(tau * math.sqrt(round_idx + 1)))


def project_ball(y: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection onto {y : ||y - center|| <= radius}; radius <= 0 means no constraint.

    Works in place on ``y`` and returns it.
    """
    if radius <= 0:
        return y
    d = y - center
    dist = float(np.sqrt(d @ d))
    if dist > radius:
        y[...] = center + d * (radius / dist)
    return y


def minibatch_indices(seed: np.random.SeedSequence | int, num_examples: int, steps: int, batch_size: int) -> np.ndarray:
    """The (steps, batch) indices of the samples zeta_t, drawn with replacement.

    Drawing them up front lets two solves share one sequence (common random numbers).
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_examples, size=(steps, min(batch_size, num_examples)))


def projected_sgd(
    grad: GradFn,
    x: np.ndarray,
    y0: np.ndarray,
    batches: np.ndarray,
    lr0: float,
    mu: float,
    radius: float = 0.0,
) -> np.ndarray:
    """Run ``len(batches)`` steps of y <- Proj_{Y(x)}[y - lr0/(t+1) (grad loss(y; zeta_t) + mu (y - x))].

    ``x`` is the query point (x_r +- eta v in ZO-HFL), ``y0`` the start point, which is
    projected onto Y(x) first. Returns the last iterate y_H (Alg. 2, line 6).
    """
    y = np.array(y0, dtype=np.float64, copy=True)
    project_ball(y, x, radius)
    for t, idx in enumerate(batches):
        g = grad(y, idx)
        if mu:
            g += mu * (y - x)
        y -= (lr0 / (t + 1)) * g
        if radius > 0:
            project_ball(y, x, radius)
    return y
