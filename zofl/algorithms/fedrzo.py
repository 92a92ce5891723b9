"""FedRZO_nn (paper 001, Algorithm 1) as pure functions: local zeroth-order steps with a Moreau term.

Names, defined once:
* ``x``     -- the model (flattened, length n); ``x_{i,k}`` client i's iterate at local step k.
* ``eta``   -- smoothing radius; directions v are drawn uniformly on the sphere of radius eta.
* ``gamma`` -- the local step size (experiments: 1e-5).
* ``X_i``   -- client i's convex local set; ``proj`` is the Euclidean projection onto it. The term
  (1/eta)(x - P_{X_i}(x)) is the gradient of the Moreau envelope (1/(2 eta)) dist^2(x, X_i).
* ``H``     -- local steps between two averagings.

Local step (Algorithm 1, lines 5-7):
  g = (n / eta^2) (f_i(x + v, xi) - f_i(x, xi)) v,   v ~ unif(eta S)
  x <- x - gamma (g + (1/eta)(x - P_{X_i}(x)))
Server (line 9): x_{r+1} = mean of the clients' x after their H steps.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

LossFn = Callable[[np.ndarray, np.ndarray], float]
"""loss(params, batch_indices) -> the client's stochastic objective f~_i(params, xi)."""


def project_box(x: np.ndarray, bound: float) -> np.ndarray:
    """Projection onto the box [-bound, bound]^n."""
    return np.clip(x, -bound, bound)


def project_ball0(x: np.ndarray, radius: float) -> np.ndarray:
    """Projection onto the ball {||x|| <= radius} centred at 0."""
    norm = float(np.sqrt(x @ x))
    return x if norm <= radius else x * (radius / norm)


def moreau_gradient(x: np.ndarray, proj: Callable[[np.ndarray], np.ndarray], eta: float) -> np.ndarray:
    """grad of (1/(2 eta)) dist^2(x, X) = (1/eta)(x - P_X(x))."""
    return (x - proj(x)) / eta


def zo_gradient(f_shifted: float, f_here: float, v: np.ndarray, eta: float) -> np.ndarray:
    """(n / eta^2)(f(x + v) - f(x)) v for v on the sphere of radius eta (Algorithm 1, line 6)."""
    return (v.size / eta**2) * (f_shifted - f_here) * v


def local_zo_steps(loss: LossFn, x: np.ndarray, batches: np.ndarray, directions: np.ndarray, gamma: float,
                   eta: float, proj: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """H = len(batches) local steps of FedRZO_nn from x; ``directions`` (H, n) are unit vectors, scaled by eta here.

    Both function values of a step use the same sample xi (Algorithm 1, line 5)."""
    x = np.array(x, dtype=np.float64, copy=True)
    for idx, u in zip(batches, directions):
        v = eta * u
        g = zo_gradient(loss(x + v, idx), loss(x, idx), v, eta)
        x -= gamma * (g + moreau_gradient(x, proj, eta))
    return x
