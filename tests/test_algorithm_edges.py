"""Edges of the pure algorithms that a mutation-testing run of zofl/algorithms found unguarded (docs/testing.md,
"Mutation testing"): each test here fails on a mutant that every other test let through."""
import numpy as np
import pytest

from zofl.algorithms.adbo import consensus_dual_step, cut_dual_step, unrolled_grad_v
from zofl.algorithms.afbo import neumann_hypergradient
from zofl.algorithms.afbo_global import local_average_hypergradient
from zofl.algorithms.fedrzo import local_zo_steps
from zofl.algorithms.lower_level import projected_sgd
from zofl.algorithms.robust import krum_index, trimmed_mean
from zofl.algorithms.scaffnew import coin_steps
from zofl.algorithms.zohfl import SolveSpec, client_solve, default_hierarchy, envelope_estimate, zo_estimate


def _spd(rng, q):
    Q = rng.normal(size=(q, q))
    return Q @ Q.T / q + np.eye(q)


def test_neumann_hypergradient_sums_exactly_N_terms():
    """FedNest's series: d - W (1/l) sum_{j<N} (I - H/l)^j v, N terms (N - 1 products), written out here."""
    rng = np.random.default_rng(0)
    p, q, l_g = 4, 3, 6.0
    d, W, H, v = rng.normal(size=p), rng.normal(size=(p, q)), _spd(rng, q), rng.normal(size=q)
    for N in (1, 2, 5):
        S = sum(np.linalg.matrix_power(np.eye(q) - H / l_g, j) for j in range(N))
        got = neumann_hypergradient(d, lambda x: W @ x, v, lambda x: H @ x, N, l_g)
        np.testing.assert_allclose(got, d - W @ (S @ v / l_g), rtol=1e-12, atol=1e-12)


def test_local_average_hypergradient_is_the_mean_of_the_local_exact_hypergradients():
    gx = [np.array([1.0, 0.0]), np.array([0.0, 2.0])]
    Js = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.0, 1.0], [1.0, 0.0]])]
    Hs = [np.diag([2.0, 4.0]), np.eye(2)]
    gys = [np.array([2.0, 4.0]), np.array([1.0, 3.0])]
    # client 0: (1, 0) - (1, 1) = (0, -1); client 1: (0, 2) - (3, 1) = (-3, 1)
    np.testing.assert_allclose(local_average_hypergradient(gx, Js, Hs, gys), [-1.5, 0.0])


def test_krum_scores_by_squared_distances():
    """Krum against a brute-force count with squared distances, on draws where summed distances (not squared)
    pick another row: at least one such draw is checked."""
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(200):
        rows = rng.normal(size=(6, 2)) * rng.uniform(0.2, 3.0, size=(6, 1))
        f = int(rng.integers(0, 3))
        k = max(1, len(rows) - f - 2)
        dist = np.linalg.norm(rows[:, None] - rows[None], axis=2)

        def pick(d):
            return int(np.argmin([np.sort(np.delete(d[i], i))[:k].sum() for i in range(len(rows))]))

        assert krum_index(rows.reshape(6, 1, 2), f) == pick(dist ** 2)
        differs += pick(dist) != pick(dist ** 2)
    assert differs >= 1


def test_trimmed_mean_refuses_half_or_more():
    x = np.arange(8.0).reshape(4, 2)
    for bad in (0.5, 0.7, -0.1):
        with pytest.raises(ValueError, match=r"trim-fraction must be in \[0, 0.5\), got"):
            trimmed_mean(x, bad)
    np.testing.assert_allclose(trimmed_mean(x, 0.49), [3.0, 4.0])  # int(0.49 * 4) = 1 dropped each side


def test_envelope_estimate_through_a_robust_rule_keeps_the_weights_total():
    """With a robust rule, the combined lambda (x - y_i) is scaled by sum_i w_i (|S_r|/m for uniform weights),
    as the weighted sum is without one; no client gives 0."""
    x = np.array([1.0, 2.0])
    ys = {0: np.array([0.0, 0.0]), 3: np.array([1.0, 1.0]), 4: np.array([3.0, 2.0])}
    w = {0: 0.2, 3: 0.2, 4: 0.2}
    median = lambda vs: np.median(np.stack(vs), axis=0)  # noqa: E731
    # lam (x - y_i): (2, 4), (0, 2), (-4, 0); median (0, 2); times 0.6
    np.testing.assert_allclose(envelope_estimate(w, ys, x, 2.0, median), [0.0, 1.2])
    np.testing.assert_allclose(envelope_estimate(w, ys, x, 2.0), 0.2 * 2.0 * ((x - ys[0]) + (x - ys[3]) + (x - ys[4])))
    none = envelope_estimate({}, {}, x, 2.0, median)
    assert none.shape == (2,) and none.dtype == np.float64 and not none.any()


def test_local_solvers_do_not_write_into_their_inputs():
    x = np.array([0.5, -0.5, 1.0])
    keep = x.copy()
    out = local_zo_steps(lambda z, idx: float(z @ z), x, np.zeros((3, 1), int), np.eye(3), 0.1, 0.01, lambda z: z)
    np.testing.assert_array_equal(x, keep)
    assert not np.array_equal(out, x)
    y0 = np.array([2.0, 0.0, 0.0])
    y = projected_sgd(lambda y, idx: y, x, y0, np.zeros((2, 1), int), 0.5, 0.0)
    np.testing.assert_array_equal(y0, [2.0, 0.0, 0.0])
    # radius 0 (the default) is no constraint: two plain steps y <- y - (0.5 / (t + 1)) y
    np.testing.assert_allclose(y, y0 * 0.5 * (1 - 0.25))


def test_unrolled_cut_gradient_uses_each_steps_own_products():
    """-2 (d y^K / d v)^T r by reverse mode, against the dense sum over steps k of
    -lr J_k^T prod_{j>k} (I - lr (H_j + mu I)) r, with a different Hessian and Jacobian per step."""
    rng = np.random.default_rng(1)
    p, q, K, mu, lr = 2, 3, 4, 0.3, 0.1
    Hs = [_spd(rng, q) for _ in range(K)]
    Js = [rng.normal(size=(p, q)) for _ in range(K)]
    r = rng.normal(size=q)
    got = unrolled_grad_v(r, [np.zeros(q)] * K, lambda w, k: Hs[k] @ w, lambda w, k: Js[k] @ w, mu, lr)
    want = np.zeros(p)
    for k in range(K):
        w = r.copy()
        for j in reversed(range(k + 1, K)):
            w = w - lr * (Hs[j] @ w + mu * w)
        want += -lr * Js[k] @ w
    np.testing.assert_allclose(got, -2.0 * want, rtol=1e-12, atol=1e-14)
    assert unrolled_grad_v(r, [], None, None, mu, lr).shape == (0,)


def test_fedrzo_bl_steps_and_average_leave_their_inputs_alone():
    from zofl.algorithms.fedrzo_bl import average, lower_local_sgd

    y0 = np.array([1.0, -2.0])
    y = lower_local_sgd(lambda x, y, idx: y, np.zeros(2), y0, np.zeros((2, 1), int), 0.5)
    np.testing.assert_array_equal(y0, [1.0, -2.0])
    np.testing.assert_allclose(y, 0.25 * y0)
    fallback = np.array([3.0, 4.0])
    out = average([], fallback)
    np.testing.assert_array_equal(out, fallback)
    out += 1.0  # the server's next step writes into it: the fallback (the last model) must not move
    np.testing.assert_array_equal(fallback, [3.0, 4.0])
    vs = [np.array([0.0, 0.0]), np.array([1.0, 1.0]), np.array([9.0, 9.0])]
    np.testing.assert_allclose(average(vs, fallback), [10 / 3, 10 / 3])
    np.testing.assert_allclose(average(vs, fallback, lambda v: np.median(np.stack(v), axis=0)), [1.0, 1.0])


def test_a_checkpoint_state_with_an_array_missing_or_unknown_is_refused(tmp_path):
    """check_state alone (the resume tests change a missing and an unknown array together): either is enough."""
    from zofl.core.checkpoint import check_state
    from zofl.core.run import RunFolderError

    want = {"x": np.zeros(3), "c": np.ones(2)}
    path = tmp_path / "state.npz"
    check_state(path, {"x": np.ones(3), "c": np.zeros(2)}, want)
    with pytest.raises(RunFolderError, match=r"does not hold this run's state \(missing \['c'\], unexpected \[\]\)"):
        check_state(path, {"x": np.ones(3)}, want)
    with pytest.raises(RunFolderError, match=r"\(missing \[\], unexpected \['y'\]\)"):
        check_state(path, {"x": np.ones(3), "c": np.zeros(2), "y": np.zeros(1)}, want)
    with pytest.raises(RunFolderError, match=r"array 'x' has shape \(2,\), this run's is \(3,\)"):
        check_state(path, {"x": np.ones(2), "c": np.zeros(2)}, want)


def test_combine_with_passes_the_weights_on():
    """combine_with hands robust_combine the weights: a weighted mean, and a median scaled by their total."""
    from types import SimpleNamespace

    from zofl.algorithms.robust import combine_with

    vs = [np.array([0.0, 3.0]), np.array([2.0, 1.0]), np.array([10.0, 5.0])]
    rule = SimpleNamespace(aggregation="mean", trim_fraction=0.2, krum_f=1)
    np.testing.assert_allclose(combine_with(rule, vs, [0.5, 0.25, 0.25]), [3.0, 3.0])
    np.testing.assert_allclose(combine_with(rule, vs), [4.0, 3.0])
    np.testing.assert_allclose(combine_with(SimpleNamespace(**{**vars(rule), "aggregation": "median"}), vs,
                                            [0.1, 0.1, 0.1]), [0.6, 0.9])


def test_afbo_global_delay_mean_and_adbo_update_rule():
    from zofl.algorithms.adbo import may_update
    from zofl.algorithms.afbo_global import delay_mean

    assert delay_mean(7, np.array([5, 7, 1]), np.array([True, True, False])) == 1.0  # ages 2 and 0
    assert delay_mean(7, np.array([5, 7, 1]), np.zeros(3, bool)) == 0.0
    assert may_update(2, np.array([], int), 2, 1) and not may_update(1, np.array([], int), 2, 1)
    assert may_update(3, np.array([0, 2]), 2, 3) and not may_update(3, np.array([0, 3]), 2, 3)


def test_a_robust_zo_estimate_combines_each_clients_mean_over_its_directions_then_scales_by_the_weights():
    """combine([u_i]) x sum_i w_i with u_i = mean_j c_ij v_ij (k = 2 directions, weights summing to 0.5, a
    combine that is not the weighted sum): run C of mutmut (2026-11-27) found this path unpinned."""
    rng = np.random.default_rng(3)
    n, k, eta = 3, 2, 0.1
    weights = {0: 0.2, 1: 0.3}
    f_values = {pid: (rng.normal(size=k), rng.normal(size=k)) for pid in weights}
    directions = {pid: rng.normal(size=(k, n)) for pid in weights}
    u = [(n / (2 * eta)) * (f_values[pid][0] - f_values[pid][1]) @ directions[pid] / k for pid in weights]
    got = zo_estimate(weights, f_values, directions, eta, n, combine=lambda us: np.max(us, axis=0))
    np.testing.assert_allclose(got, np.max(u, axis=0) * 0.5, rtol=1e-12)
    assert not zo_estimate({}, {}, {}, eta, n, combine=lambda us: np.ones(n)).any()  # no client: 0


def test_without_crn_the_minus_side_draws_are_fresh_for_each_direction_and_client_and_repeatable():
    """crn = false: the x - eta v solve draws its own minibatches, seeded by (client's words, j): two equal
    directions get different draws, two clients different draws, the same call the same draws."""
    data = np.random.default_rng(0).normal(size=(40, 4))
    hier = default_hierarchy(lambda y, idx: y - data[idx].mean(axis=0), 1.0, 1.0, 0.0)
    spec = SolveSpec(eta=0.1, lam=1.0, mu=1.0, lr0=0.5, batch_size=2, crn=False)
    v = np.tile(np.random.default_rng(1).normal(size=4), (2, 1))  # the same direction twice
    a, b, again = (client_solve(hier, 40, np.zeros(4), v, 5, spec, seed) for seed in ((7,), (8,), (7,)))
    assert not np.allclose(a.y_minus[0], a.y_minus[1])
    assert not np.allclose(a.y_minus[0], b.y_minus[0])
    np.testing.assert_array_equal(a.y_minus, again.y_minus)


def test_scaffnew_coin_probability_must_be_in_0_1():
    for p in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
            coin_steps(np.random.default_rng(0), p)
    assert coin_steps(np.random.default_rng(0), 1.0) == 1


def test_adbos_dual_steps_shrink_the_duals_by_their_regularisation():
    """lam_l <- max(0, lam_l + lr (value_l - c1 lam_l)) and theta_j <- theta_j + lr (x_j - v - c2 theta_j), with
    c1, c2 > 0 (the other tests use 0), written out: run C of mutmut found the sign of the c terms unpinned."""
    lam, on, values = np.array([1.0, 2.0, 0.5]), np.array([True, True, False]), np.array([0.5, -5.0, 1.0])
    # 1 + 0.5 (0.5 - 0.2 x 1) = 1.15; 2 + 0.5 (-5 - 0.2 x 2) < 0, projected to 0; an empty slot stays 0
    np.testing.assert_allclose(cut_dual_step(lam, on, values, 0.5, 0.2), [1.15, 0.0, 0.0])
    theta, xs, v = np.array([[1.0, -1.0], [2.0, 0.0]]), np.array([[0.5, 0.5], [1.0, 1.0]]), np.array([0.25, 0.0])
    got = consensus_dual_step(theta, xs, v, np.array([True, False]), 0.1, 0.3)
    np.testing.assert_allclose(got, [theta[0] + 0.1 * (xs[0] - v - 0.3 * theta[0]), theta[1]])


def test_the_edges_left_by_the_mutation_run():
    """Each value sits on a bound a surviving mutant moved (docs/mutation-survivors.md)."""
    from zofl.algorithms.adbo import drop_inactive
    from zofl.algorithms.afbo import aligned_local_sgd, stored_mean
    from zofl.algorithms.robust import clip_coefficients, robust_combine

    # AFBO: a client with E = 0 local steps sends zeros (not 0/0) and its y unchanged
    G, y = aligned_local_sgd(lambda y, idx: y + 1.0, np.ones(3), np.zeros((0, 2), dtype=int), 0.1)
    assert G.tolist() == [0.0, 0.0, 0.0] and y.tolist() == [1.0, 1.0, 1.0]
    # AFBO: the mean over the clients heard from, before any: zeros of the update's length
    assert stored_mean(np.ones((4, 3)), np.zeros(4, dtype=bool), "stored").tolist() == [0.0, 0.0, 0.0]
    # robust rules: weights summing to exactly 2 double the combination
    v = [np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 60.0])]
    assert robust_combine(v, "median", weights=[1.0, 0.5, 0.5]).tolist() == [6.0, 8.0]
    # clipping at kappa <= 1: the bound is kappa x the median |coefficient|
    clipped = clip_coefficients({0: np.array([1.0, -4.0]), 1: np.array([2.0, 3.0])}, 0.5)
    assert clipped[0].tolist() == [1.0, -1.25] and clipped[1].tolist() == [1.25, 1.25]
    # ADBO: a cut whose dual is exactly at the tolerance stays
    assert drop_inactive(np.array([1e-10, 0.5e-10]), np.array([True, True])).tolist() == [True, False]


def test_aphe_gives_each_term_its_own_minibatch_in_the_documented_order():
    """APHE's docstring: batches[0] for d = grad_x f, batches[1] for W (the Jacobian product), batches[2] for
    grad_y f, batches[3:] for the Hessian products in turn (each term its own minibatch, so that the
    estimate is a product of independent unbiased factors)."""
    from zofl.algorithms.afbo import aphe

    seen = []
    batches = [np.array([k]) for k in range(3 + 4)]

    def rec(name, out):
        return lambda *a: seen.append((name, int(a[-1][0]))) or out(*a)

    v = np.ones(2)
    for mode in ("random-depth", "sum", "printed"):
        seen.clear()
        aphe(rec("d", lambda b: v), rec("gy", lambda b: v), rec("hvp", lambda p, b: 0.5 * p),
             rec("jvp", lambda p, b: p), batches, N_i=4, lipschitz=2.0, mode=mode,
             rng=np.random.default_rng(3))
        assert seen[:2] == [("d", 0), ("gy", 2)] and seen[-1] == ("jvp", 1), (mode, seen)
        hess = [b for name, b in seen if name == "hvp"]
        assert hess == list(range(3, 3 + len(hess))), (mode, seen)


def test_client_solve_uses_the_step_offset_and_a_straggler_reports_no_f2():
    """ZO-HFL's client_solve on a task's own problem (run D's left survivors): with h = (1/2)||y - b||^2,
    one step of lr0 / (0 + Gamma) = 1/2 from y_0 = x +- eta v lands half way to b in both solves (Gamma = 1
    would land on b); with H = 0 the f2 values are 0 even where the task's f2 is not."""
    from zofl.algorithms.zohfl import Hierarchy, SolveSpec

    b = np.array([2.0, -4.0])
    hier = Hierarchy(lambda x, y: 1.0 + float(y @ y), lambda x, y, idx: y - b, lambda x, y: y)
    x, v = np.array([1.0, 1.0]), np.array([[0.6, 0.8]])
    spec = SolveSpec(eta=0.5, lam=1.0, mu=1.0, lr0=1.0, batch_size=1, Gamma=2.0)
    res = client_solve(hier, 4, x, v, 1, spec, (0, 1))
    np.testing.assert_allclose(res.y_plus[0], (x + 0.5 * v[0] + b) / 2)
    np.testing.assert_allclose(res.y_minus[0], (x - 0.5 * v[0] + b) / 2)
    assert res.f_plus[0] == 1.0 + res.y_plus[0] @ res.y_plus[0] and res.steps == 2
    idle = client_solve(hier, 4, x, v, 0, spec, (0, 1))
    assert (idle.f_plus.tolist(), idle.f_minus.tolist(), idle.steps) == ([0.0], [0.0], 0)


def test_projected_sgd_computes_in_float64_whatever_y0s_dtype():
    """A float32 (or integer) start point gives a float64 solve: the steps lr0 / (t + 1) are not rounded to y0's
    precision (an integer y0 could not even take them)."""
    x = np.zeros(2)
    for y0 in (np.array([1.0, 3.0], dtype=np.float32), np.array([1, 3])):
        y = projected_sgd(lambda y, idx: y, x, y0, np.zeros((3, 1), int), 0.1, 0.0)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, np.array([1.0, 3.0]) * (1 - 0.1) * (1 - 0.05) * (1 - 0.1 / 3), rtol=1e-14)
