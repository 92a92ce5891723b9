"""Randomized smoothing: sphere directions and the two-point zeroth-order estimator.

Pure numpy, no Flower. Notation (ZO-HFL paper, Sec. II):

* ``n``   -- dimension of the flattened global model x.
* ``eta`` -- smoothing radius (eta > 0). The smoothed function is
  f^eta(x) = E_{u ~ unif(B)} f(x + eta u), B the unit ball.
* ``v``   -- a direction drawn uniformly on the unit sphere S of R^n.

The two-point estimator of grad f^eta(x) is

    g = (n / (2 eta)) * (f(x + eta v) - f(x - eta v)) * v,          (Alg. 1, line 7)

which is unbiased for grad f^eta(x) (Lemma 7 of the paper; for a quadratic f the
smoothed gradient equals the true gradient, which the tests use).
"""
from __future__ import annotations

import numpy as np


def seed_sequence(*words: int) -> np.random.SeedSequence:
    """A SeedSequence from integer words, e.g. (run seed, round, client id, stream).

    Every random quantity of a run is derived from such a tuple, so the server and any
    client regenerate the same numbers without sending them.
    """
    return np.random.SeedSequence([int(w) for w in words])


def sphere_directions(seed: np.random.SeedSequence | int, k: int, n: int) -> np.ndarray:
    """``k`` directions drawn uniformly on the unit sphere of R^n, as rows of a (k, n) array.

    A normalised standard Gaussian is uniform on the sphere. Reproducible from ``seed``.
    """
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((k, n))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g


def orthogonal_directions(seed: np.random.SeedSequence | int, k: int, n: int) -> np.ndarray:
    """``k`` <= n orthonormal directions, rows of a (k, n) array: the first k columns of a Haar-random
    orthogonal matrix (QR of a Gaussian matrix with the signs of R's diagonal fixed). Each row is
    uniform on the sphere, so the two-point estimate stays unbiased; orthogonality lowers the
    variance of its mean over the k directions below that of k independent draws (ours): for a
    linear or quadratic f, total variance (n - k)/k ||grad||^2 against (n - 1)/k ||grad||^2 (lower
    for 1 < k <= n, exact at k = n, a small gain when k << n; tests/test_zohfl.py)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((n, k)))
    return (q * np.sign(np.diag(r))).T.copy()


def two_point_coefficients(f_plus: np.ndarray, f_minus: np.ndarray, n: int, eta: float) -> np.ndarray:
    """(n / (2 eta)) (f+ - f-), the scalar that multiplies each direction."""
    return (n / (2.0 * eta)) * (np.asarray(f_plus, dtype=np.float64) - np.asarray(f_minus, dtype=np.float64))


def two_point_estimate(f_plus: np.ndarray, f_minus: np.ndarray, directions: np.ndarray, eta: float) -> np.ndarray:
    """Average over k directions of (n / (2 eta)) (f(x + eta v_j) - f(x - eta v_j)) v_j.

    ``f_plus``/``f_minus`` have shape (k,), ``directions`` shape (k, n).
    """
    directions = np.atleast_2d(directions)
    coef = two_point_coefficients(f_plus, f_minus, directions.shape[1], eta)
    return coef @ directions / directions.shape[0]
