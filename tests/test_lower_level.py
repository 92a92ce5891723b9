"""Algorithm 2 (projected SGD on the lower level), without Flower."""
import numpy as np
import pytest

from zofl.algorithms.lower_level import local_steps, minibatch_indices, project_ball, projected_sgd


def test_local_steps_schedule():
    assert [local_steps(r, 20) for r in range(4)] == [20, 29, 35, 40]  # ceil(20 sqrt(r+1))
    assert local_steps(0, 5) == 5 and local_steps(99, 5) == 50
    assert local_steps(7, 20, fixed=3) == 3
    assert local_steps(3, 0) == 0


def test_project_ball():
    c = np.array([1.0, -2.0, 0.5])
    inside = c + np.array([0.1, 0.0, 0.0])
    np.testing.assert_array_equal(project_ball(inside.copy(), c, 0.5), inside)
    out = c + np.array([3.0, 4.0, 0.0])
    p = project_ball(out.copy(), c, 2.0)
    assert np.linalg.norm(p - c) == pytest.approx(2.0)
    np.testing.assert_allclose((p - c) / 2.0, np.array([0.6, 0.8, 0.0]))  # same direction
    np.testing.assert_array_equal(project_ball(p.copy(), c, 2.0), p)  # idempotent
    np.testing.assert_array_equal(project_ball(out.copy(), c, 0.0), out)  # radius 0 = no constraint
    # projection is the closest point of the ball: no random point of the ball is closer
    rng = np.random.default_rng(0)
    pts = c + project_ball_rows(rng.standard_normal((500, 3)) * 3, 2.0)
    assert np.all(np.linalg.norm(pts - out, axis=1) >= np.linalg.norm(p - out) - 1e-12)


def project_ball_rows(d, r):
    return np.array([project_ball(row.copy(), np.zeros(3), r) for row in d])


def _quadratic_problem(seed=0, n=8, N=200):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((N, n)) * 2.0  # loss_j(y) = 0.5 ||y - c_j||^2
    grad = lambda y, idx: y - c[idx].mean(axis=0)  # noqa: E731
    return c, grad


def test_h_zero_returns_start_point_and_ball_is_respected():
    c, grad = _quadratic_problem()
    x = np.ones(8)
    y0 = x + 0.1
    np.testing.assert_array_equal(projected_sgd(grad, x, y0, minibatch_indices(0, len(c), 0, 4), 0.1, 1.0), y0)
    y = projected_sgd(grad, x, x, minibatch_indices(0, len(c), 200, 4), 0.5, 1.0, radius=0.3)
    assert np.linalg.norm(y - x) <= 0.3 + 1e-12


def test_lower_level_error_shrinks_with_H():
    # Proposition 1: E||y_H - y*||^2 = O(1/H) for a strongly convex lower level with step lr0/(t+1).
    c, grad = _quadratic_problem()
    mu, lr0 = 1.0, 1.0  # h(y) = mean_j 0.5||y - c_j||^2 + mu/2 ||x - y||^2, strong convexity 1 + mu
    x = np.full(8, 3.0)
    y_star = (c.mean(axis=0) + mu * x) / (1 + mu)
    err = {}
    for H in (10, 100, 1000):
        errs = [np.sum((projected_sgd(grad, x, x, minibatch_indices(s, len(c), H, 4), lr0, mu) - y_star) ** 2)
                for s in range(40)]
        err[H] = float(np.mean(errs))
    assert err[100] < err[10] / 4 and err[1000] < err[100] / 4, err
