"""afbo-global (ours, beyond paper 002): AFBO's asynchronous server with FedNest's global Neumann series
on a shared vector. Its server equations reach the true hyper-gradient's zero with stale stored values;
on the heterogeneous quadratic where AFBO is biased it reaches the closed-form x* and AFBO does not; a
slow client with availability < 1 does not stop it; a stopped and resumed run equals the uninterrupted
one bit for bit; hyper-cleaning runs. Engines: the in-process Grid only (no Flower / Ray run)."""
import numpy as np

from zofl.algorithms.afbo_global import (
    client_hyper_piece,
    client_residual,
    global_hypergradient,
    inner_step,
    local_average_hypergradient,
    neumann_step,
    outer_step,
)
from zofl.core.protocol import Reply
from zofl.inprocess import run_inprocess
from zofl.methods.afbo_global import AFBOGlobal
from zofl.results import read_rounds
from zofl.setup import prepare
from zofl.tasks.hypergrad import HeterogeneousQuadratic

HET = "zofl.tasks.hypergrad:HeterogeneousQuadratic"


def _het():
    spec = prepare({"task": HET, "strategy": "fednest", "num-clients": 4})[2]
    task = HeterogeneousQuadratic()
    return task.solution(spec)[0], task.local_average_solution(spec), float(f"{1.1 * task.lipschitz(spec):.3f}")


X_STAR, X_LOCAL, LIP = _het()
# tests/test_afbo.py's heterogeneous run (one local step, exact oracles), on the asynchronous engine
RUN = {"task": HET, "engine": "async", "num-clients": 4, "local-steps": 1, "lower-lr": 0.2, "inner-lr": 0.3,
       "inner-rounds": 5, "lipschitz-g": LIP, "aphe": "sum", "checkpoint-every": 0}
GLOBAL = {**RUN, "strategy": "afbo-global", "neumann-steps": "2"}  # 5 + 2 + 1 = 8 server steps per outer round


def _rel(x):
    return float(np.linalg.norm(x - X_STAR) / np.linalg.norm(X_STAR))


def test_server_equations_reach_the_global_hypergradient_zero_with_stale_values():
    """Equations (R), (N), (Q), (X), (Y) of zofl.algorithms.afbo_global with dense oracles, Hessians AND
    Jacobians different per client, and every step refreshing only a random half of the stored values
    (the others stale): x goes to the zero of the true hyper-gradient (G), not to AFBO's."""
    rng = np.random.default_rng(3)
    m, p, q, lam = 5, 3, 4, 0.5
    A = [(lambda Q: Q @ Q.T / q + np.eye(q))(rng.normal(size=(q, q))) for _ in range(m)]
    B, c, e = rng.normal(size=(m, q, p)), rng.normal(size=(m, q)), rng.normal(size=(m, q))
    # g_i = y^T A_i y / 2 - y^T (B_i x + e_i), f_i = |y - c_i|^2 / 2 + lam |x|^2 / 2; J_i = -B_i^T
    Abar, Bbar, ebar = np.mean(A, axis=0), B.mean(axis=0), e.mean(axis=0)
    M = np.linalg.solve(Abar, Bbar)
    x_star = np.linalg.solve(M.T @ M + lam * np.eye(p), M.T @ (c.mean(axis=0) - np.linalg.solve(Abar, ebar)))

    def y_of(x):
        return np.linalg.solve(Abar, Bbar @ x + ebar)

    def hyper(x, local):  # (G), or AFBO's mean of local hyper-gradients, at y*(x)
        y = y_of(x)
        args = ([lam * x] * m, [-b.T for b in B], A, [y - ci for ci in c])
        return (local_average_hypergradient if local else global_hypergradient)(*args)

    assert np.linalg.norm(hyper(x_star, local=False)) < 1e-12
    assert np.linalg.norm(hyper(x_star, local=True)) > 0.1  # AFBO's limit is elsewhere
    l_g = 1.1 * max(np.linalg.eigvalsh(a).max() for a in A)
    beta = 1.0 / np.linalg.eigvalsh(Abar).max()
    eta = 0.3 / np.linalg.eigvalsh(M.T @ M + lam * np.eye(p)).max()
    x, y, v = np.zeros(p), np.zeros(q), np.zeros(q)
    G, R, Qs = np.zeros((m, q)), np.zeros((m, q)), np.zeros((m, p))
    for step in range(3000):
        for i in np.flatnonzero(rng.random(m) < 0.5):  # these clients' replies arrive; the others' stay stale
            G[i] = A[i] @ y - B[i] @ x - e[i]
            R[i] = client_residual(lambda w: A[i] @ w, y - c[i], v)
            Qs[i] = client_hyper_piece(lam * x, lambda w: -B[i].T @ w, v)
        kind = step % 5  # 3 inner steps, 1 Neumann step, 1 outer step, each with the stored values
        if kind < 3:
            y = inner_step(y, G.mean(axis=0), beta)
        elif kind == 3:
            v = neumann_step(v, R.mean(axis=0), l_g)
        else:
            x = outer_step(x, Qs.mean(axis=0), eta)
    np.testing.assert_allclose(x, x_star, atol=1e-8)
    np.testing.assert_allclose(v, np.linalg.solve(Abar, y_of(x_star) - c.mean(axis=0)), atol=1e-8)


def test_from_zero_fresh_neumann_steps_are_fednests_truncated_series():
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(4, 4))
    H, b, l_g = Q @ Q.T / 4 + np.eye(4), rng.normal(size=4), 8.0
    v, series, term = np.zeros(4), np.zeros(4), b.copy()
    for _ in range(6):
        v = neumann_step(v, client_residual(lambda w: H @ w, b, v), l_g)
        series, term = series + term, term - H @ term / l_g
    np.testing.assert_allclose(v, series / l_g, rtol=1e-13)


def test_afbo_global_reaches_the_closed_form_x_star_where_afbo_does_not(tmp_path):
    """The heterogeneous quadratic (a different B_i per client): 3 of 4 clients per server step, device
    speeds U(0.5, 1), so stored values are stale. afbo-global ends at x* to 1e-5 of its norm; AFBO, same
    engine, same clients, ends at its biased point (lam x + mean_i B_i^T A^-1 (y*(x) - c_i) = 0), more
    than |x*| away from x*."""
    common = {"buffer-size": 3, "speed-profile": "uniform", "speed-param": 0.5, "outer-lr": 0.5,
              "output-dir": str(tmp_path)}
    d_g, x_g = run_inprocess({**GLOBAL, **common, "num-rounds": 8 * 40, "run-name": "global"}, workers=0)
    _, x_a = run_inprocess({**RUN, **common, "strategy": "afbo", "neumann-steps": "20", "num-rounds": 6 * 40,
                            "run-name": "afbo"}, workers=0)
    assert _rel(x_g) < 1e-5, x_g
    assert _rel(x_a) > 1.0 and np.linalg.norm(x_a - X_LOCAL) < 1e-3 * np.linalg.norm(X_STAR), x_a
    rec = read_rounds(d_g)[1:]
    assert rec[-1]["outer_round"] == 40 and {r["step"] for r in rec} == {"inner", "neumann", "outer"}
    assert any(s > 0 for r in rec for s in r["staleness"]) and max(r["outer_age_mean"] for r in rec) > 0


def test_a_slow_client_and_availability_below_one_do_not_stop_it(tmp_path):
    """Client 0 at 1/5 of the speed, client 1 (and 3) sitting out 40% of their tasks, a step after 2 replies:
    values up to ~10 server steps old. With a smaller outer step (0.2) x still reaches x*."""
    cfg = {**GLOBAL, "buffer-size": 2, "speed-profile": "slow", "slow-clients": "0", "speed-param": 0.2,
           "availability": "1,0.6", "outer-lr": 0.2, "num-rounds": 8 * 60, "output-dir": str(tmp_path),
           "run-name": "slow"}
    d, x = run_inprocess(cfg, workers=0)
    rec = read_rounds(d)[1:]
    assert _rel(x) < 1e-2, x
    assert sum(r["unavailable"] for r in rec) > 0 and 0 in {c for r in rec for c in r["clients"]}
    assert max(max(r["staleness"]) for r in rec) >= 5 and max(r["inner_age_mean"] for r in rec) > 5


def test_stopped_and_resumed_equals_uninterrupted_bit_for_bit(tmp_path):
    cfg = {**GLOBAL, "buffer-size": 2, "speed-profile": "uniform", "speed-param": 0.3, "availability": "0.7",
           "outer-lr": 0.2, "checkpoint-every": 3, "num-rounds": 40, "output-dir": str(tmp_path)}
    d_ref, x_ref = run_inprocess({**cfg, "run-name": "ref"}, workers=0)
    run_inprocess({**cfg, "num-rounds": 19, "run-name": "cut"}, workers=0)  # stops mid Neumann phase, tasks in flight
    d, x = run_inprocess({**cfg, "resume": True, "run-name": "cut"}, workers=0)
    np.testing.assert_array_equal(x, x_ref)
    keys = ("round", "test_loss", "y_error", "clients", "staleness", "clock_s", "step", "residual_norm",
            "inner_age_mean", "neumann_age_mean", "outer_age_mean")
    assert [[r.get(k) for k in keys] for r in read_rounds(d)] == [[r.get(k) for k in keys] for r in read_rounds(d_ref)]


def test_state_dict_round_trip_and_the_stored_bookkeeping():
    cfg, task, spec = prepare({**GLOBAL, "num-clients": 3, "buffer-size": 1, "inner-rounds": 1, "neumann-steps": "1"})
    method = AFBOGlobal(cfg, task, spec)
    s = method.init()
    s = method.receive(s, Reply(1, {"G": np.ones(3)}, 1), 0)
    assert method.ready(s, [Reply(1, {"G": np.ones(3)}, 1)]) and not method.ready(s, [Reply(1, {"r": np.ones(3)}, 1)])
    s, f = method.update_async(s, 0, [], [])
    assert f["step"] == "inner" and method.phase(s) == "neumann"
    np.testing.assert_allclose(s["y"], -cfg["inner-lr"] * np.ones(3))  # the mean over the clients heard from
    s = method.receive(s, Reply(2, {"r": np.full(3, 2.0)}, 1), 1)  # computed one step ago, on version 0
    assert s["r_ver"][2] == 0 and s["r_have"][2]
    s, f = method.update_async(s, 1, [], [])
    np.testing.assert_allclose(s["v"], -2.0 / cfg["lipschitz-g"] * np.ones(3))
    assert f["inner_age_mean"] == 1.0 and f["neumann_age_mean"] == 1.0 and method.phase(s) == "outer"
    assert f["residual_norm"] == np.linalg.norm(np.full(3, 2.0))  # of the mean residual the step used
    assert s["counters"].tolist() == [0, 0, 2, 2]  # [t, k, phase, step]: k starts again for the outer step
    back = method.load_state_dict(method.state_dict(s))
    assert back.keys() == s.keys() and all(np.array_equal(back[k], s[k]) and back[k].dtype == s[k].dtype for k in s)
    # client 0 has sent nothing: once its values are more than one outer round (3 steps) old it refreshes them
    s["counters"][3] = 9
    assert method.plan_task(s, 9, 0, 0).config["phase"] in ("inner", "neumann")
    s["G_ver"][0] = s["r_ver"][0] = 8
    assert method.plan_task(s, 9, 0, 0).config["phase"] == "outer"


def test_unread_keys_change_nothing(tmp_path):
    from tests.test_config import other_values
    from zofl.methods import reads

    cfg = {**GLOBAL, "buffer-size": 3, "num-rounds": 16, "output-dir": str(tmp_path)}
    unread = {k: v for k, v in other_values().items() if not reads("afbo-global", k) and k not in cfg}
    assert set(unread) >= {"max-outer-delay", "staleness-exponent", "eta"}
    cfg.pop("aphe")
    d0, x0 = run_inprocess({**cfg, "run-name": "a"}, workers=0)
    d1, x1 = run_inprocess({**cfg, **unread, "aphe": "printed", "run-name": "b"}, workers=0)
    np.testing.assert_array_equal(x0, x1)
    keys = ("test_loss", "clients", "staleness", "clock_s")
    assert [[r.get(k) for k in keys] for r in read_rounds(d0)] == [[r.get(k) for k in keys] for r in read_rounds(d1)]


def test_hyper_cleaning_short_run_ends_finite(tmp_path):
    cfg = {"strategy": "afbo-global", "engine": "async", "task": "hyper-cleaning", "num-clients": 4, "alpha": 0.5,
           "server-fraction": 0.0, "local-steps": 5, "lower-lr": 0.5, "inner-lr": 1.0, "inner-rounds": 5,
           "outer-lr": 10.0, "neumann-steps": "1", "lipschitz-g": 20.0, "num-rounds": 21, "checkpoint-every": 0,
           "output-dir": str(tmp_path), "run-name": "hc"}
    d, x = run_inprocess(cfg, workers=0)
    rec = read_rounds(d)
    assert np.isfinite(x).all() and all(np.isfinite(r["test_loss"]) for r in rec) and rec[-1]["outer_round"] == 3
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3 and np.abs(x).max() > 0  # y learned, x moved


def test_a_checkpoint_s_state_is_checked_and_shares_no_array_with_the_running_state():
    """AFBO-global's state_dict and load_state_dict: copies both ways (a step that writes into the state in place
    cannot change what was saved or loaded); a checkpoint without one of the state's arrays refused, naming it."""
    import pytest

    cfg, task, spec = prepare({**GLOBAL, "num-rounds": 2})
    method = AFBOGlobal(cfg, task, spec)
    state = method.init()
    saved = method.state_dict(state)
    for k, v in saved.items():
        assert not np.shares_memory(v, state[k]), k
    loaded = method.load_state_dict(saved)
    for k, v in loaded.items():
        assert not np.shares_memory(v, saved[k]), k
        np.testing.assert_array_equal(v, state[k])
    gone = next(iter(saved))
    with pytest.raises(ValueError, match=f"afbo-global checkpoint lacks \\['{gone}'\\]"):
        method.load_state_dict({k: v for k, v in saved.items() if k != gone})


def test_a_clients_inner_task_draws_its_own_batches_and_each_task_costs_its_steps():
    """A client's inner task (E_i lower steps) draws its minibatches from the stream of (seed, task, client): the
    same work gives the same G_i, another seed or client another; on the simulated clock an inner task costs its
    E_i steps, a Neumann or outer task two oracle calls."""
    from zofl.core.protocol import Work
    from zofl.methods.afbo_global import INNER, NEUMANN, OUTER, client_work

    cfg, task, spec = prepare({**GLOBAL, "task": "hyper-cleaning", "num-clients": 3, "batch-size": 4})
    method = AFBOGlobal(cfg, task, spec)
    work = method.plan_task(method.init(), 0, 0, 1)
    assert work.config["phase"] == INNER and method.task_steps(work) == work.H
    g = [client_work(c, task, spec, Work(pid, 0, 5, dict(work.arrays), dict(work.config)), {}).arrays["G"]
         for c, pid in ((cfg, 1), (cfg, 1), (prepare({**GLOBAL, "task": "hyper-cleaning", "num-clients": 3,
                                                         "batch-size": 4, "seed": 1})[0], 1), (cfg, 2))]
    assert np.array_equal(g[0], g[1]) and not np.array_equal(g[0], g[2]) and not np.array_equal(g[0], g[3])
    for phase in (NEUMANN, OUTER):
        assert method.task_steps(Work(1, 0, 7, {}, {"phase": phase})) == 2
    assert method.task_steps(Work(1, 0, 7, {}, {"phase": INNER})) == 7


def test_each_kind_of_client_task_uses_its_documented_streams_and_every_argument(monkeypatch):
    """client_work with probe oracles (each a function of every argument it gets, the batch included): an inner
    task's E_i batches come from the stream (seed, task, client, BATCHES), a Neumann or outer task's one upper
    batch from (..., BATCHES, 0) and one lower batch from (..., BATCHES, 1); each oracle gets x, y, v and its batch
    (a user's f may depend on x and on its data); the reply names its client and costs its steps."""
    from zofl import streams
    from zofl.algorithms.afbo import aligned_local_sgd
    from zofl.algorithms.lower_level import minibatch_indices
    from zofl.algorithms.smoothing import seed_sequence
    from zofl.core.protocol import Work
    from zofl.methods.afbo_global import INNER, NEUMANN, OUTER, client_work
    from zofl.tasks.hypergrad import Oracles

    cfg, task, spec = prepare({**GLOBAL, "num-clients": 3, "batch-size": 3, "seed": 7})
    p, q = len(task.init_x(cfg, spec)), len(task.init_y(cfg, spec))
    tag = lambda x, y, idx: 1e-3 * (x.sum() + 2 * y.sum()) + 1e-4 * idx.sum()  # noqa: E731
    o = Oracles(grad_y_g=lambda x, y, idx: 0.5 * y + tag(x, y, idx),
                hvp_yy_g=lambda x, y, v, idx: v * (1 + tag(x, y, idx)),
                jvp_xy_g=lambda x, y, v, idx: np.full(p, v.sum() + tag(x, y, idx)),
                grad_x_f=lambda x, y, idx: x + tag(x, y, idx),
                grad_y_f=lambda x, y, idx: y - tag(x, y, idx), n_lower=50, n_upper=40, num_examples=90)
    monkeypatch.setattr(type(task), "client_oracles", lambda self, settings, spec, pid: o)
    rng = np.random.default_rng(0)
    arrays = {"x": rng.normal(size=p), "y": rng.normal(size=q), "v": rng.normal(size=q)}
    x, y, v = arrays["x"], arrays["y"], arrays["v"]
    pid, task_no, E = 2, 5, 4

    def batches(n, count, *tail):
        return minibatch_indices(seed_sequence(7, task_no, pid, streams.BATCHES, *tail), n, count, 3)

    def run(phase):
        return client_work(cfg, task, spec, Work(pid, task_no, E, dict(arrays), {"phase": phase, "t": 0}), {})

    inner = run(INNER)
    G, _ = aligned_local_sgd(lambda yy, idx: o.grad_y_g(x, yy, idx), y, batches(50, E),
                             AFBOGlobal(cfg, task, spec).hp.lower_lr)
    assert inner.pid == pid and inner.metrics["steps"] == E and np.array_equal(inner.arrays["G"], G)
    up, lo = batches(40, 1, 0)[0], batches(50, 1, 1)[0]
    neumann, outer = run(NEUMANN), run(OUTER)
    r = client_residual(lambda vv: o.hvp_yy_g(x, y, vv, lo), o.grad_y_f(x, y, up), v)
    qq = client_hyper_piece(o.grad_x_f(x, y, up), lambda vv: o.jvp_xy_g(x, y, vv, lo), v)
    assert np.array_equal(neumann.arrays["r"], r) and np.array_equal(outer.arrays["q"], qq)
    assert neumann.pid == outer.pid == pid and neumann.metrics["steps"] == outer.metrics["steps"] == 2
    # the client's compute time (the records' client_compute_s), and a Neumann or outer reply's outer round
    assert set(inner.metrics) == {"steps", "compute_s"} and neumann.metrics.keys() == outer.metrics.keys() == {
        "steps", "t", "compute_s"} and neumann.metrics["t"] == outer.metrics["t"] == 0


def test_the_schedule_period_task_configs_and_the_oldest_kind_refreshed_first(monkeypatch):
    """An outer round is K + N + 1 server steps (N: neumann-steps' first entry); the state is float64 whatever
    the task's x_0 and y_0, versions int64; an inner task's E_i follows tau's schedule in the outer round t, and
    every task names its phase, t and k; a client's kind more than one period old is refreshed, the oldest first,
    one exactly a period old is not."""
    cfg, task, spec = prepare({**GLOBAL, "num-clients": 3, "neumann-steps": "3,5", "local-steps": 0, "tau": 1.5})
    p, q = len(task.init_x(cfg, spec)), len(task.init_y(cfg, spec))
    monkeypatch.setattr(type(task), "init_x", lambda self, c, sp: [0] * p)  # a user's task may give ints
    monkeypatch.setattr(type(task), "init_y", lambda self, c, sp: [1] * q)
    method = AFBOGlobal(cfg, task, spec)
    assert method.N == 3 and method.period() == cfg["inner-rounds"] + 3 + 1 == 9
    s = method.init()
    assert s["x"].dtype == s["y"].dtype == np.float64 and s["y"][0] == 1.0
    assert all(s[f"{key}_ver"].dtype == np.int64 and s[f"{key}_have"].dtype == bool for key in ("G", "r", "q"))
    s["counters"] = np.array([3, 2, 0, 30], np.int64)  # outer round t = 3, inner step k = 2, step 30
    for key in ("G", "r", "q"):
        s[f"{key}_ver"][:] = 30
    work = method.plan_task(s, 30, 0, 1)
    assert work.H == 3 and work.config == {"phase": "inner", "t": 3, "k": 2}  # ceil(1.5 * sqrt(3 + 1))
    s["counters"][2] = 2  # the outer phase
    assert method.plan_task(s, 30, 0, 1).config == {"phase": "outer", "t": 3, "k": 2}
    s["G_ver"][1], s["r_ver"][1] = 30 - 9, 30 - 9  # exactly one period old: not late
    assert method.task_kind(s, 1) == "outer"
    s["G_ver"][1], s["r_ver"][1] = 30 - 12, 30 - 10  # both late: the older (inner) first
    assert method.task_kind(s, 1) == "inner"
