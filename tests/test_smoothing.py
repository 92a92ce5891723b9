"""The randomized-smoothing pieces, without Flower."""
import numpy as np

from zofl.algorithms.smoothing import seed_sequence, sphere_directions, two_point_estimate


def test_directions_are_unit_and_reproducible():
    v = sphere_directions(seed_sequence(1, 2, 3), 50, 17)
    assert v.shape == (50, 17)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(v, sphere_directions(seed_sequence(1, 2, 3), 50, 17))
    assert not np.allclose(v, sphere_directions(seed_sequence(1, 2, 4), 50, 17))


def test_directions_are_uniform_on_sphere():
    # E[v v^T] = I / n for v uniform on the unit sphere
    n = 6
    v = sphere_directions(0, 40_000, n)
    np.testing.assert_allclose(v.T @ v / len(v), np.eye(n) / n, atol=0.01)
    np.testing.assert_allclose(v.mean(axis=0), 0.0, atol=0.01)


def test_two_point_estimator_is_unbiased_for_a_quadratic():
    # For f(x) = 0.5 x'Ax + b'x the smoothed gradient equals the gradient A x + b, so the
    # mean of the two-point estimates must match it within a few standard errors.
    rng = np.random.default_rng(0)
    n, N, eta = 5, 40_000, 0.3
    M = rng.standard_normal((n, n))
    A, b, x = M @ M.T + np.eye(n), rng.standard_normal(n), rng.standard_normal(n)
    f = lambda z: 0.5 * np.einsum("ki,ij,kj->k", z, A, z) + z @ b  # noqa: E731
    v = sphere_directions(1, N, n)
    coef = (n / (2 * eta)) * (f(x + eta * v) - f(x - eta * v))
    samples = coef[:, None] * v
    mean, se = samples.mean(axis=0), samples.std(axis=0) / np.sqrt(N)
    truth = A @ x + b
    assert np.all(np.abs(mean - truth) < 5 * se), (mean, truth, se)
    # the helper computes the same average
    np.testing.assert_allclose(two_point_estimate(f(x + eta * v), f(x - eta * v), v, eta), mean, rtol=1e-10)
    # and the test can fail: a biased estimator (wrong scale n/eta) is far off
    assert np.any(np.abs(2 * mean - truth) > 5 * se)
