"""Scaffnew: ProxSkip applied to federated learning (Mishchenko, Malinovsky, Stich and Richtarik, ICML 2022,
"ProxSkip: Yes! Local gradient steps provably lead to communication acceleration! Finally!", Algorithm 2).

Algorithm 2, for f = (1/n) sum_i f_i, step gamma, communication probability p, h_{i,0} with sum_i h_{i,0} = 0:

    server: flip a coin theta_t in {0, 1} with Prob(theta_t = 1) = p
    every client i:  x^_{i,t+1} = x_{i,t} - gamma (g_i(x_{i,t}) - h_{i,t})            (line 5: local_steps)
                     x_{i,t+1} = (1/n) sum_j x^_{j,t+1} if theta_t = 1, else x^_{i,t+1}  (line 7: communicate)
                     h_{i,t+1} = h_{i,t} + (p / gamma) (x_{i,t+1} - x^_{i,t+1})         (line 11: control_update)

With theta_t = 0, x_{i,t+1} = x^_{i,t+1} and h_i is unchanged: the control variates move only when the
clients communicate. So one communication round of the harness is the run of steps between two heads of
the one shared coin: K ~ Geometric(p) local steps (``coin_steps``), the same K for every client, the last
of them followed by the average and the h update. Names: ``x`` the model every client starts the round
from (all x_{i,t} are equal right after a communication), ``x_hat`` a client's x^ after its K steps,
``h`` its control variate, ``gamma`` the step, ``p`` the coin's probability.
"""
from __future__ import annotations

import numpy as np

from .fedavg import local_sgd
from .lower_level import GradFn


def coin_steps(rng: np.random.Generator, p: float) -> int:
    """K: the flips of a coin with Prob(heads) = p up to and including the first heads (Geometric(p) on
    {1, 2, ...}, mean 1/p): the local steps until the next communication, one draw shared by every client."""
    if not 0 < p <= 1:
        raise ValueError(f"the communication probability p must be in (0, 1], got {p}")
    return int(rng.geometric(p))


def local_steps(grad: GradFn, x: np.ndarray, h: np.ndarray, batches: np.ndarray, gamma: float) -> np.ndarray:
    """Line 5, K = len(batches) times from x: y <- y - gamma (grad f_i(y; batch_t) - h); returns x^ (the
    steps of SCAFFOLD's corrected local SGD with correction -h and the constant step gamma)."""
    return local_sgd(grad, x, batches, np.full(len(batches), float(gamma)), correction=-np.asarray(h))


def communicate(x_hats: list[np.ndarray]) -> np.ndarray:
    """Line 7: x_{t+1} = (1/n) sum_j x^_j (every client gets the same average)."""
    return np.mean(np.stack(x_hats), axis=0)


def control_update(h: np.ndarray, x_new: np.ndarray, x_hat: np.ndarray, p: float, gamma: float) -> np.ndarray:
    """Line 11 after a communication: h_i + (p / gamma) (x_{t+1} - x^_i)."""
    return h + (p / gamma) * (x_new - x_hat)
