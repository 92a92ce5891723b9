"""FedRZO_bl (paper 001, Algorithm 2) with FedAvg as its lower-level oracle (Algorithm 3), as pure functions.

Problem (FL_bl): min_x (1/m) sum_i f_i(x, y(x)),  y(x) = argmin_y (1/m) sum_i h_i(x, y).
Minimax (FL_mm) is the case h_i = -f_i (Sec. 4.2): y(x) is then the maximiser of the mean f_i.

Names, defined once (those of ``zofl.algorithms.fedrzo`` keep their meaning: eta, gamma, X_i, H):
* ``x_hat``   -- the server's upper-level iterate x^_r at the start of upper round r.
* ``v``       -- the round's single global direction v_{T_r}, uniform on the sphere of radius eta.
* ``y_plus``, ``y_base`` -- y_eps(x^_r + v) and y_eps(x^_r): the lower-level oracle's inexact solutions,
  computed once per upper round and used, delayed, in all H local steps (Remark 3).
* ``R~_r``    -- lower-level FedAvg rounds per oracle call in upper round r; it grows with r (the
  paper terminates the oracle after O(r) iterations). Our schedule: R~_r = R~_0 + floor(growth * r).
* ``H~``, ``gamma~`` -- local steps and step size of the lower-level FedAvg (Algorithm 3).

One upper round r is 2 R~_r + 1 communication rounds, in this order (``phase_of``):
  R~_r lower rounds at x^_r + v  ->  y_plus;  R~_r lower rounds at x^_r  ->  y_base;  1 upper round.
Upper local step (Algorithm 2, lines 8-9), client i, k = 0..H-1, from x_{i,0} = x^_r:
  g = (n / eta^2) (f_i(x_{i,k} + v, y_plus, xi) - f_i(x_{i,k}, y_base, xi)) v
  x_{i,k+1} = x_{i,k} - gamma (g + (1/eta)(x_{i,k} - P_{X_i}(x_{i,k})))
Lower local step (Algorithm 3): y_{i,t+1} = y_{i,t} - gamma~ grad_y h_i(x, y_{i,t}, xi~); the server averages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .fedrzo import moreau_gradient, zo_gradient

UpperFn = Callable[[np.ndarray, np.ndarray, np.ndarray], float]
"""f(x, y, batch_indices) -> the client's stochastic upper objective f~_i(x, y, xi)."""
LowerGrad = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""grad(x, y, batch_indices) -> grad_y h~_i(x, y, xi~)."""

LOWER_PLUS, LOWER_BASE, UPPER = "lower-plus", "lower-base", "upper"


def lower_rounds(r: int, base: int, growth: float) -> int:
    """R~_r = base + floor(growth * r): lower-level FedAvg rounds per oracle call in upper round r."""
    return base + int(np.floor(growth * r))


def communication_rounds(num_upper: int, base: int, growth: float) -> int:
    """All communication rounds of ``num_upper`` upper rounds: sum_r (2 R~_r + 1)."""
    return sum(2 * lower_rounds(r, base, growth) + 1 for r in range(num_upper))


@dataclass(frozen=True)
class Phase:
    """Where communication round k (0-based) falls: upper round r, its phase, and the index j of
    the lower round within the phase (0 for the upper round)."""

    r: int
    phase: str
    j: int
    lower_rounds: int  # R~_r


def phase_of(k: int, base: int, growth: float) -> Phase:
    """The phase of communication round k (0-based) under the schedule above."""
    if k < 0:
        raise ValueError(f"communication round must be >= 0, got {k}")
    r = 0
    while True:
        R = lower_rounds(r, base, growth)
        if k < R:
            return Phase(r, LOWER_PLUS, k, R)
        if k < 2 * R:
            return Phase(r, LOWER_BASE, k - R, R)
        if k == 2 * R:
            return Phase(r, UPPER, 0, R)
        k -= 2 * R + 1
        r += 1


def lower_local_sgd(grad: LowerGrad, x: np.ndarray, y: np.ndarray, batches: np.ndarray, lr: float) -> np.ndarray:
    """H~ = len(batches) local steps of Algorithm 3 at a fixed upper point x, from y."""
    y = np.array(y, dtype=np.float64, copy=True)
    for idx in batches:
        y -= lr * grad(x, y, idx)
    return y


def upper_local_steps(f: UpperFn, x_hat: np.ndarray, v: np.ndarray, y_plus: np.ndarray, y_base: np.ndarray,
                      batches: np.ndarray, gamma: float, eta: float,
                      proj: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """H = len(batches) local steps of Algorithm 2 (lines 6-10) from x^_r with the delayed y's.

    ``v`` is the round's direction, already on the sphere of radius eta. Both function values of a
    step use the same sample xi_{i,k} (line 7)."""
    x = np.array(x_hat, dtype=np.float64, copy=True)
    for idx in batches:
        g = zo_gradient(f(x + v, y_plus, idx), f(x, y_base, idx), v, eta)
        x -= gamma * (g + moreau_gradient(x, proj, eta))
    return x


def average(vectors: list[np.ndarray], fallback: np.ndarray, combine=None) -> np.ndarray:
    """The server's aggregation (1/|S| sum); ``fallback`` (unchanged) if no client replied."""
    if not vectors:
        return np.array(fallback, dtype=np.float64, copy=True)
    return np.mean(vectors, axis=0) if combine is None else combine(vectors)
