"""AFBO (paper 002) and FedNest: APHE against dense matrices, both methods reaching the
closed-form solution of a quadratic bilevel problem, AFBO's stored updates and delays, and the
simulated clock's reproducibility. Engines: the in-process Grid (the Ray runs are in
test_flower_e2e.py)."""
import numpy as np
import pytest

from zofl.algorithms.afbo import aphe, neumann_hypergradient, stored_mean
from zofl.config import parse_config
from zofl.core.protocol import Reply
from zofl.inprocess import run_inprocess
from zofl.methods.afbo import AFBO
from zofl.methods.fednest import phase_of
from zofl.results import read_rounds
from zofl.setup import prepare
from zofl.tasks.hypergrad import QuadraticHypergrad

TOY = "zofl.tasks.hypergrad:QuadraticHypergrad"


def dense_aphe(d, W, Hs, v, N_i: int, lipschitz: float, mode: str, depth: int, N: int | None = None):
    """APHE (zofl.algorithms.afbo.aphe) with dense matrices (W: p x q, Hs: the q x q Hessians of the products):
    the tests' reference, written from Algorithm 2 independently of the product form."""
    q = v.size
    if mode == "random-depth":
        P = np.eye(q)
        for j in range(depth):
            P = (np.eye(q) - Hs[j] / lipschitz) @ P
        p = (N_i / lipschitz) * P @ v
    elif mode == "sum":
        P, S = np.eye(q), np.eye(q)
        for j in range(N_i - 1):
            P = (np.eye(q) - Hs[j] / lipschitz) @ P
            S = S + P
        p = S @ v / lipschitz
    else:
        P = np.eye(q)
        for j in range(N_i):
            P = (np.eye(q) - Hs[j] / lipschitz) @ P
        p = ((N if N is not None else N_i) / lipschitz) * P @ v
    return d - W @ p


def _problem(rng, p=4, q=3, n_hess=8):
    Hs = []
    for _ in range(n_hess):
        Q = rng.normal(size=(q, q))
        Hs.append(Q @ Q.T / q + np.eye(q))
    return rng.normal(size=p), rng.normal(size=(p, q)), Hs, rng.normal(size=q)


class _WalkDepths:
    """A stand-in for np.random.Generator: its k-th ``integers(low, high)`` call returns low + k (mod the
    range), so N_i calls of ``aphe`` walk every depth of the range the code asks for, each once. It
    honours the arguments: ``aphe`` drawing from {1, ..., N_i} walks those depths, not 0, ..., N_i - 1."""

    def __init__(self):
        self.calls = 0

    def integers(self, low, high=None):
        low, high = (0, low) if high is None else (low, high)
        k, self.calls = self.calls, self.calls + 1
        return low + k % (high - low)


def _counting_oracles(d, W, Hs, v):
    """aphe's oracles over dense matrices (minibatch k of the k-th call, Hessians from batch 3 on),
    with the number of Hessian-vector products made (the depth, in random-depth mode)."""
    count = [0]

    def hvp(x, idx):
        count[0] += 1
        return Hs[int(idx[0]) - 3] @ x

    return (lambda idx: d, lambda idx: v, hvp, lambda x, idx: W @ x), count


def _truncated_series(d, W, Hs, v, N_i, l_g):
    """d - W (1/l) sum_{n<N_i} prod_{j<n} (I - H_j / l) v, written out here (not the code's "sum" mode)."""
    q = v.size
    P, S = np.eye(q), np.zeros((q, q))
    for n in range(N_i):
        S += P
        if n < len(Hs):
            P = (np.eye(q) - Hs[n] / l_g) @ P
    return d - W @ (S @ v / l_g)


@pytest.mark.parametrize("mode", ["sum", "printed"])
def test_aphe_with_products_equals_the_dense_computation(mode):
    rng = np.random.default_rng(1)
    d, W, Hs, v = _problem(rng)
    N_i, l_g = 5, 8.0
    batches = [np.array([k]) for k in range(3 + N_i)]  # minibatch k of the k-th oracle call
    oracles, _ = _counting_oracles(d, W, Hs, v)
    got = aphe(*oracles, batches, N_i, l_g, mode, np.random.default_rng(7), N=6)
    want = dense_aphe(d, W, Hs[:N_i], v, N_i, l_g, mode, depth=0, N=6)  # depth: read by random-depth only
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if mode == "sum":  # and the dense reference is the truncated series itself
        np.testing.assert_allclose(want, _truncated_series(d, W, Hs[:N_i], v, N_i, l_g), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["random-depth", "sum", "printed"])
def test_aphe_evaluates_each_gradient_on_its_own_minibatch(mode):
    """d = grad_x f on batches[0], W on batches[1], grad_y f on batches[2], the products on batches[3:]: for a task
    whose f depends on x through its data (the built-in tasks' grad_x f ignore their batch, which once let
    ``grad_x_f(None)`` pass as harmless: docs/mutation-survivors.md)."""
    seen = {}

    def record(name, value):
        def f(*args):
            seen.setdefault(name, []).append(args[-1])
            return value(*args)
        return f

    v, q = np.array([1.0, 2.0]), np.array([0.5])
    batches = [np.array([k]) for k in range(3 + 4)]
    H = aphe(record("dx", lambda b: q * float(b[0] + 1)), record("dy", lambda b: v.copy()),
             record("hvp", lambda p, b: 0.1 * p), record("jvp", lambda p, b: q * p.sum()), batches, 4, 2.0, mode,
             rng=np.random.default_rng(0), N=4)
    assert [int(b[0]) for b in seen["dx"]] == [0] and [int(b[0]) for b in seen["jvp"]] == [1]
    assert [int(b[0]) for b in seen["dy"]] == [2] and all(int(b[0]) >= 3 for b in seen.get("hvp", []))
    assert np.isfinite(H).all()


def test_random_depth_aphe_walks_every_depth_and_averages_to_the_truncated_series():
    """The real ``aphe``, with a generator that hands it every depth in turn: depth k makes exactly k
    Hessian-vector products and gives the dense estimate of depth k; the N_i estimates average to the
    truncated Neumann series (1/l) sum_{n<N_i} prod_{j<n} (I - H_j/l) v exactly, a different Hessian per
    factor. A depth never 0, or drawn from N_i + 1 values, is a biased estimator and fails here."""
    rng = np.random.default_rng(1)
    d, W, Hs, v = _problem(rng)
    for N_i, l_g in ((1, 8.0), (5, 8.0), (8, 5.0)):
        batches = [np.array([k]) for k in range(3 + N_i)]
        oracles, count = _counting_oracles(d, W, Hs, v)
        walk, got, depths = _WalkDepths(), [], []
        for _ in range(N_i):
            before = count[0]
            got.append(aphe(*oracles, batches, N_i, l_g, "random-depth", walk))
            depths.append(count[0] - before)
        assert walk.calls == N_i and depths == list(range(N_i)), depths  # one draw an estimate; every depth
        for k, g in enumerate(got):
            np.testing.assert_allclose(g, dense_aphe(d, W, Hs[:N_i], v, N_i, l_g, "random-depth", depth=k),
                                       rtol=1e-12, atol=1e-12)
        want = _truncated_series(d, W, Hs[:N_i], v, N_i, l_g)
        np.testing.assert_allclose(np.mean(got, axis=0), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(aphe(*oracles, batches, N_i, l_g, "sum"), want, rtol=1e-12, atol=1e-12)


def test_random_depth_aphe_with_numpys_generator_is_uniform_and_unbiased():
    """The same with the generator runs use: over 6,000 estimates the depth (counted Hessian-vector
    products) takes exactly the values 0, ..., N_i - 1, each about 1/N_i of the time, and the mean estimate
    is within 4.5 standard errors of the truncated series in every coordinate."""
    rng = np.random.default_rng(3)
    d, W, Hs, v = _problem(rng)
    N_i, l_g, draws = 5, 4.0, 6000
    batches = [np.array([k]) for k in range(3 + N_i)]
    oracles, count = _counting_oracles(d, W, Hs, v)
    gen = np.random.default_rng(11)
    est, depths = [], []
    for _ in range(draws):
        before = count[0]
        est.append(aphe(*oracles, batches, N_i, l_g, "random-depth", gen))
        depths.append(count[0] - before)
    freq = np.bincount(depths, minlength=N_i) / draws
    assert len(freq) == N_i and freq.min() > 0, freq  # no depth N_i, and depth 0 too
    np.testing.assert_allclose(freq, 1 / N_i, atol=4.5 * np.sqrt(0.2 * 0.8 / draws))
    est = np.array(est)
    se = est.std(axis=0, ddof=1) / np.sqrt(draws)
    assert np.all(np.abs(est.mean(axis=0) - _truncated_series(d, W, Hs[:N_i], v, N_i, l_g)) < 4.5 * se)


def test_the_truncated_series_tends_to_the_exact_hypergradient():
    rng = np.random.default_rng(2)
    d, W, Hs, v = _problem(rng)
    exact = d - W @ np.linalg.solve(Hs[0], v)
    far = neumann_hypergradient(d, lambda x: W @ x, v, lambda x: Hs[0] @ x, 400, 5.0)
    np.testing.assert_allclose(far, exact, rtol=1e-8)
    np.testing.assert_allclose(_truncated_series(d, W, [Hs[0]] * 400, v, 400, 5.0), exact, rtol=1e-8)


def test_stored_mean_over_all_or_the_clients_heard_from():
    stored = np.array([[2.0, 0.0], [4.0, 2.0], [0.0, 0.0]])
    have = np.array([True, True, False])
    np.testing.assert_allclose(stored_mean(stored, have, "stored"), [3.0, 1.0])
    np.testing.assert_allclose(stored_mean(stored, have, "all"), [2.0, 2.0 / 3])


def test_afbo_keeps_the_last_update_of_a_silent_client_and_counts_delays():
    cfg, task, spec = prepare({"strategy": "afbo", "engine": "async", "task": TOY, "num-clients": 3,
                               "inner-rounds": 2, "inner-lr": 0.5, "outer-lr": 0.1, "buffer-size": 1,
                               "max-outer-delay": 1})
    method = AFBO(cfg, task, spec)
    s = method.init()

    def arrive(s, *replies):
        for rep in replies:
            s = method.receive(s, rep, 0)
        return s

    def G(pid, val):
        return Reply(pid, {"G": np.full(3, float(val))}, 1)

    s, f = method.update_async(arrive(s, G(0, 2.0), G(1, 4.0)), 0, [], [])
    np.testing.assert_array_equal(s["rho"], [0, 0, 1])
    np.testing.assert_allclose(s["y"], -0.5 * np.full(3, 3.0))  # mean of the two stored G's
    s, f = method.update_async(arrive(s, G(0, 0.0)), 1, [], [])  # client 1 silent: its G = 4 still counts
    np.testing.assert_array_equal(s["rho"], [0, 1, 2])
    np.testing.assert_allclose(s["y"], -1.5 - 0.5 * 2.0)
    assert method.phase(s) == "outer" and f["step"] == "inner"  # K^t = 2 inner steps done
    assert not method.ready(s, [G(2, 1.0)])  # a late inner reply does not make an outer step...
    s = arrive(s, G(2, 1.0))
    assert s["G_have"][2]  # ...but it is stored at once, for the next inner steps
    H = Reply(2, {"H": np.ones(3)}, 1, {"t": 0})
    assert method.ready(s, [G(2, 1.0), H])
    s, f = method.update_async(arrive(s, H), 2, [], [])
    np.testing.assert_array_equal(s["tau"], [1, 1, 0])
    assert f["step"] == "outer" and method.phase(s) == "inner" and s["H_round"][2] == 0
    np.testing.assert_allclose(s["x"], -0.1 * np.ones(3))  # only client 2's H is stored so far
    # outer round 1: client 0 has no H at all (more than max-outer-delay = 1 round old), so it computes
    # one before more inner work; client 2's H is from round 0, one round old: inner work
    assert s["counters"][0] == 1
    assert method.plan_task(s, 3, 9, 0).config["phase"] == "outer"
    assert method.plan_task(s, 3, 9, 2).config["phase"] == "inner"


def test_fednest_round_schedule():
    assert [phase_of(k, 2, 3)[1] for k in range(7)] == ["inner", "inner", "gradf", "neumann", "neumann", "hyper",
                                                        "inner"]
    assert phase_of(6, 2, 3)[0] == 1


@pytest.mark.parametrize("N", [1, 2, 5])
def test_fednests_rounds_step_x_by_the_shared_neumann_hypergradient_bit_for_bit(N):
    """FedNest's server, fed the exact global products each round asks for (one client: its mean is its reply), from
    a gradf round through N - 1 neumann rounds to the hyper round, steps x by eta times ``neumann_hypergradient``
    on the same d, W, H, v: bit for bit, the series FedNest runs is the tested function's (``neumann_term``)."""
    from zofl.core.method import RoundPlan
    from zofl.methods.fednest import FedNest

    cfg, task, spec = prepare({"strategy": "fednest", "task": TOY, "num-clients": 2, "inner-rounds": 1,
                               "neumann-steps": str(N), "lipschitz-g": 2.6, "outer-lr": 0.3})
    method = FedNest(cfg, task, spec)
    rng = np.random.default_rng(7)
    d, W, Hs, v = _problem(rng, p=method.p, q=method.q, n_hess=1)
    l_g, H = 2.6, Hs[0]
    state = {**method.init(), "x": rng.normal(size=method.p)}
    x0 = state["x"].copy()
    phases = []
    for r in range(1, N + 2):  # round 0 is the inner round
        ph = method.phase(r)[1]
        phases.append(ph)
        arrays = {"gradf": lambda: {"gy": v, "gx": d}, "neumann": lambda: {"hv": H @ state["v"]},
                  "hyper": lambda: {"jv": W @ (state["h"] / l_g)}}[ph]()
        state, _ = method.update(state, RoundPlan(r, [0], [], []), [Reply(0, arrays, 1, {})])
    assert phases == ["gradf"] + ["neumann"] * (N - 1) + ["hyper"]
    want = x0 - 0.3 * neumann_hypergradient(d, lambda z: W @ z, v, lambda z: H @ z, N, l_g)
    assert state["x"].tobytes() == want.tobytes()


TOY_RUN = {"task": TOY, "num-clients": 4, "local-steps": 1, "lower-lr": 0.2, "inner-lr": 0.3, "inner-rounds": 5,
           "lipschitz-g": 2.6, "neumann-steps": "20", "aphe": "sum", "beta": 1.0, "checkpoint-every": 0}
# l_{g,1} = 2.6 >= the largest eigenvalue of A (2.36 for seed 0, 4 clients), so the series converges


def test_afbo_and_fednest_reach_the_closed_form_solution(tmp_path):
    x_star, y_star = QuadraticHypergrad().solution(prepare({"task": TOY, "strategy": "afbo", "engine": "async",
                                                            "num-clients": 4})[2])
    # AFBO: 3 of 4 clients per step, devices of speeds U(0.5, 1), so updates are stale
    d_a, x_a = run_inprocess({**TOY_RUN, "strategy": "afbo", "engine": "async", "buffer-size": 3, "outer-lr": 0.3,
                              "num-rounds": 6 * 40, "speed-profile": "uniform", "speed-param": 0.5,
                              "output-dir": str(tmp_path), "run-name": "afbo"}, workers=0)
    d_f, x_f = run_inprocess({**TOY_RUN, "strategy": "fednest", "outer-lr": 0.5, "num-rounds": 25,
                              "output-dir": str(tmp_path), "run-name": "fednest"}, workers=0)
    start = np.linalg.norm(x_star)
    for d, x in ((d_a, x_a), (d_f, x_f)):
        last = read_rounds(d)[-1]
        assert np.linalg.norm(x - x_star) < 1e-3 * start, (x, x_star)
        assert last["y_error"] < 1e-2 * np.linalg.norm(y_star)
    rec = read_rounds(d_a)[1:]
    assert max(r["outer_delay_mean"] for r in rec) > 0 and any(s > 0 for r in rec for s in r["staleness"])


def test_averaging_local_hypergradients_is_biased_when_jacobians_differ(tmp_path):
    # With a different B_i per client, AFBO's mean of the clients' own hyper-gradients goes to the
    # zero of lam x + mean_i B_i^T A^-1 (y*(x) - c_i), not to x*; FedNest's global products do not.
    het = "zofl.tasks.hypergrad:HeterogeneousQuadratic"
    from zofl.tasks.hypergrad import HeterogeneousQuadratic

    spec = prepare({"task": het, "strategy": "fednest", "num-clients": 4})[2]
    x_star, x_local = HeterogeneousQuadratic().solution(spec)[0], HeterogeneousQuadratic().local_average_solution(spec)
    lip = f"{1.1 * HeterogeneousQuadratic().lipschitz(spec):.3f}"
    _, x_a = run_inprocess({**TOY_RUN, "task": het, "lipschitz-g": float(lip), "strategy": "afbo", "engine": "async",
                            "buffer-size": 4, "outer-lr": 0.5, "num-rounds": 6 * 40, "output-dir": str(tmp_path),
                            "run-name": "afbo"}, workers=0)
    _, x_f = run_inprocess({**TOY_RUN, "task": het, "lipschitz-g": float(lip), "strategy": "fednest",
                            "outer-lr": 0.5, "num-rounds": 40, "output-dir": str(tmp_path), "run-name": "fednest"},
                           workers=0)
    assert np.linalg.norm(x_star - x_local) > 0.1 * np.linalg.norm(x_star)  # the two points are far apart
    np.testing.assert_allclose(x_a, x_local, atol=2e-3)
    np.testing.assert_allclose(x_f, x_star, atol=2e-3)


def test_afbo_simulated_clock_runs_are_equal_bit_for_bit(tmp_path):
    cfg = {**TOY_RUN, "strategy": "afbo", "engine": "async", "aphe": "random-depth", "neumann-steps": "3,6",
           "availability": "1,0.5", "local-work": "1,3", "speed-profile": "uniform", "speed-param": 0.2,
           "inner-rounds": 3, "num-rounds": 24, "output-dir": str(tmp_path)}  # any participation, N_i and E_i
    (d1, x1), (d2, x2) = (run_inprocess({**cfg, "run-name": n}, workers=0) for n in ("a", "b"))
    np.testing.assert_array_equal(x1, x2)
    keys = ("test_loss", "clients", "staleness", "clock_s", "inner_delay_mean", "outer_delay_mean")
    assert [[r.get(k) for k in keys] for r in read_rounds(d1)] == [[r.get(k) for k in keys] for r in read_rounds(d2)]


@pytest.mark.parametrize("strategy", ["afbo", "fednest"])
def test_hyper_cleaning_runs_and_learns(tmp_path, strategy):
    cfg = {"strategy": strategy, "task": "hyper-cleaning", "num-clients": 4, "server-fraction": 0.0,
           "local-steps": 5, "lower-lr": 0.5, "inner-lr": 1.0, "inner-rounds": 5, "outer-lr": 10.0,
           "neumann-steps": "5", "lipschitz-g": 20.0, "output-dir": str(tmp_path), "run-name": strategy}
    cfg.update({"engine": "async", "num-rounds": 36} if strategy == "afbo" else {"num-rounds": 3})
    d, x = run_inprocess(cfg, workers=0)
    rec = read_rounds(d)
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3 and np.isfinite(x).all()
    assert all(np.isfinite(r["weight_clean"]) for r in rec)
    assert rec[0]["weight_auc"] == 0.5 and 0.0 <= rec[-1]["weight_auc"] <= 1.0


def test_roc_auc_is_the_share_of_clean_corrupted_pairs_ordered_right():
    """roc_auc against a brute-force count over every (kept, corrupted) pair, ties 1/2, with and without ties;
    and hyper-cleaning's evaluate reports 1 / 0 / 0.5 for weights that order the pairs right / wrong / not at all."""
    from zofl.tasks.hypergrad import HyperCleaningTask, roc_auc

    rng = np.random.default_rng(0)
    for t in range(100):
        n = int(rng.integers(2, 40))
        score = rng.integers(0, 4, n).astype(float) if t % 2 else rng.normal(size=n)
        pos = rng.random(n) < 0.5
        if pos.all() or not pos.any():
            assert np.isnan(roc_auc(score, pos))
            continue
        brute = np.mean([[1.0 if a > b else 0.5 if a == b else 0.0 for b in score[~pos]] for a in score[pos]])
        assert roc_auc(score, pos) == pytest.approx(brute, abs=1e-12)
    cfg = parse_config({"strategy": "fednest", "task": "hyper-cleaning", "num-clients": 3, "server-fraction": 0.0})
    task, spec = HyperCleaningTask(), prepare(dict(cfg))[2]
    corrupted, y = task.corrupted(cfg, spec), task.init_y(cfg, spec)
    assert len(corrupted) == task.dims(cfg, spec)[0] and 0.3 < corrupted.mean() < 0.6
    for x, want in ((np.where(corrupted, -1.0, 1.0), 1.0), (np.where(corrupted, 1.0, -1.0), 0.0),
                    (task.init_x(cfg, spec), 0.5)):
        assert task.evaluate(cfg, spec, x, y)["weight_auc"] == want
    # the mean weight sigma(x_j) of each kind; a kind with no example is nan (corruption 0: nothing corrupted)
    figures = task.evaluate(cfg, spec, np.where(corrupted, 0.0, np.log(3.0)), y)
    assert figures["weight_corrupted"] == 0.5 and figures["weight_clean"] == pytest.approx(0.75, abs=1e-15)
    clean = parse_config({**dict(cfg), "corruption": 0.0})
    x0 = np.zeros(len(task.corrupted(clean, spec)))
    figures = task.evaluate(clean, spec, x0, y)
    assert np.isnan(figures["weight_corrupted"]) and figures["weight_clean"] == 0.5
    assert np.isnan(figures["weight_auc"])  # one class only
    # the labels' kinds may come as 0/1 numbers: read as booleans (a bitwise ~ of integers would be -1 and -2)
    scores = [0.1, 0.9, 0.5, 0.2]
    assert roc_auc(scores, [0, 1, 1, 0]) == roc_auc(scores, [False, True, True, False]) == 1.0


def test_bilevel_methods_need_a_hypergradient_task():
    from zofl.config import ConfigError

    with pytest.raises(ConfigError, match="needs a hyper-gradient bilevel task"):
        prepare({"strategy": "fednest"})
    with pytest.raises(ConfigError, match="needs a single-level task"):
        prepare({"task": "hyper-cleaning"})
    assert parse_config({"strategy": "afbo", "engine": "async"})["aphe"] == "random-depth"


def test_regularization_hypergradient_matches_finite_differences():
    """The regularization task's oracles give the true hyper-gradient of Phi(x) = f(x, y*(x)) for
    one client: d - W H^{-1} grad_y f (exact solve) against central differences of Phi, with y*
    found by Newton's method on the task's own Hessian-vector products."""
    from zofl.tasks.hypergrad import RegularizationTask, ce_loss

    cfg = parse_config({"strategy": "fednest", "task": "regularization", "num-clients": 4, "server-fraction": 0.0})
    task, spec = RegularizationTask(), prepare(dict(cfg))[2]
    o = task.client_oracles(cfg, spec, 0)
    lo, up = np.arange(o.n_lower), np.arange(o.n_upper)
    p, q = task.dims(cfg, spec)
    rng = np.random.default_rng(0)
    x = np.log(0.05) + rng.normal(size=p)

    def hessian(x, y):
        return np.stack([o.hvp_yy_g(x, y, e, lo) for e in np.eye(q)], axis=1)

    def y_star(x):
        y = np.zeros(q)
        for _ in range(20):
            g = o.grad_y_g(x, y, lo)
            if np.linalg.norm(g) < 1e-12:
                return y
            y = y - np.linalg.solve(hessian(x, y), g)
        raise AssertionError("Newton's method did not converge")

    from zofl.tasks.hypergrad import _labelled_arrays
    _, _, u_val, val_labels, C = _labelled_arrays(spec, 0, cfg.holdout_fraction)

    def phi(x):
        return float(np.mean(ce_loss(y_star(x).reshape(-1, C), u_val, val_labels)))

    y = y_star(x)
    H = hessian(x, y)
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    hyper = o.grad_x_f(x, y, up) - o.jvp_xy_g(x, y, np.linalg.solve(H, o.grad_y_f(x, y, up)), lo)
    for _ in range(2):
        dx = rng.normal(size=p)
        h = 1e-4
        fd = (phi(x + h * dx) - phi(x - h * dx)) / (2 * h)
        np.testing.assert_allclose(hyper @ dx, fd, rtol=1e-5)


@pytest.mark.parametrize("strategy", ["afbo", "fednest"])
def test_regularization_runs_learns_and_the_control_keeps_x(tmp_path, strategy):
    cfg = {"strategy": strategy, "task": "regularization", "num-clients": 4, "server-fraction": 0.0,
           "local-steps": 5, "lower-lr": 0.5, "inner-lr": 0.5, "inner-rounds": 5, "outer-lr": 1e4,
           "neumann-steps": "5", "lipschitz-g": 20.0, "output-dir": str(tmp_path)}
    cfg.update({"engine": "async", "num-rounds": 36, "buffer-size": 2} if strategy == "afbo" else {"num-rounds": 3})
    d, x = run_inprocess({**cfg, "run-name": "moves"}, workers=0)
    rec = read_rounds(d)
    x0 = np.log(0.001)
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.5 and np.isfinite(x).all() and np.abs(x - x0).max() > 0.01
    _, x = run_inprocess({**cfg, "outer-lr": 0.0, "run-name": "control"}, workers=0)
    np.testing.assert_array_equal(x, np.full_like(x, x0))
