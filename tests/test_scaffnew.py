"""Scaffnew (ProxSkip's Algorithm 2): the one shared coin, a communication and the control-variate update by
hand (the pure functions, the client half and the server half), exact convergence on heterogeneous least
squares where local GD drifts, and the strategy in-process (the coin in the records, h kept by the server,
resume bit for bit)."""
import numpy as np
import pytest

from zofl.algorithms.fedavg import local_sgd
from zofl.algorithms.scaffnew import coin_steps, communicate, control_update, local_steps
from zofl.core.method import RoundPlan
from zofl.core.protocol import Work
from zofl.inprocess import run_inprocess
from zofl.methods import METHODS, scaffnew
from zofl.results import read_rounds
from zofl.setup import prepare
from zofl.tasks.data import ArrayData

SMALL = {"strategy": "scaffnew", "num-clients": 4, "beta": 1.0, "x0": "zeros", "comm-prob": 0.2, "local-lr": 0.1,
         "seed": 5}


def method(**cfg):
    c, task, spec = prepare({**SMALL, **cfg})
    return METHODS["scaffnew"].server(c, task, spec)


def test_the_shared_coin_communicates_with_probability_p():
    """R = 40,000 rounds of the method's own coin at p = 0.2: K_r >= 1 local steps and one communication
    per round, so communications per local step R / sum K_r estimate p. Its standard deviation is about
    p sqrt((1 - p) / R) = 0.0009: 0.004 (4.5 sd) cannot fail by chance, and p = 0.19 or 0.21 would be
    0.01 away. P(K = k) = (1 - p)^(k - 1) p for the first steps (sd <= 0.002, tolerance 0.008)."""
    m = method()
    K = np.array([m.round_H(None, r) for r in range(40_000)])
    assert K.min() >= 1
    assert abs(len(K) / K.sum() - 0.2) < 0.004
    for k in range(1, 5):
        assert abs(np.mean(K == k) - 0.8 ** (k - 1) * 0.2) < 0.008
    assert K.tolist()[:50] == [method().round_H(None, r) for r in range(50)]  # from (seed, r): no state
    assert K.tolist()[:50] != [method(seed=6).round_H(None, r) for r in range(50)]
    with pytest.raises(ValueError):
        coin_steps(np.random.default_rng(0), 0.0)
    assert coin_steps(np.random.default_rng(0), 1.0) == 1  # p = 1: communicate after every step


def _quadratic_clients(a):
    """f_i(x) = (1/2)||x - a_i||^2: grad f_i(x) = x - a_i whatever the minibatch."""
    return [lambda y, idx, ai=ai: y - ai for ai in a]


def test_a_communication_and_the_control_update_by_hand():
    """Two clients, f_i(x) = (1/2)(x - a_i)^2, a = (1, 3), x = 0, h = (0.5, -0.5), gamma = 0.5, p = 0.25.
    One step: x^_1 = 0 - 0.5 (0 - 1 - 0.5) = 0.75, x^_2 = 0 - 0.5 (0 - 3 + 0.5) = 1.25; x+ = 1;
    h_1 = 0.5 + (0.25 / 0.5)(1 - 0.75) = 0.625, h_2 = -0.5 + 0.5 (1 - 1.25) = -0.625 (sum still 0).
    Two steps for client 1: 0.75 - 0.5 (0.75 - 1 - 0.5) = 1.125."""
    grads = _quadratic_clients([np.array([1.0]), np.array([3.0])])
    x, h = np.zeros(1), [np.array([0.5]), np.array([-0.5])]
    one = np.zeros((1, 0), dtype=np.int64)
    x_hats = [local_steps(g, x, hi, one, 0.5) for g, hi in zip(grads, h)]
    np.testing.assert_allclose(np.concatenate(x_hats), [0.75, 1.25])
    x_new = communicate(x_hats)
    np.testing.assert_allclose(x_new, [1.0])
    h_new = [control_update(hi, x_new, xh, 0.25, 0.5) for hi, xh in zip(h, x_hats)]
    np.testing.assert_allclose(np.concatenate(h_new), [0.625, -0.625])
    np.testing.assert_allclose(local_steps(grads[0], x, h[0], np.zeros((2, 0), dtype=np.int64), 0.5), [1.125])


class _ConstantClients:
    """A task whose client i holds rows all equal to a_i (so grad = x - a_i, for any minibatch)."""

    def __init__(self, a):
        self.a = a

    def client_data(self, spec, pid):
        return ArrayData(np.tile(self.a[pid], (6, 1)), np.zeros(6, dtype=np.int64), 2)

    def grad(self, p, x, y):
        return p - x.mean(axis=0)


def test_client_and_server_halves_do_the_hand_computation():
    """The same numbers through scaffnew.client_work (x^_i from the x and h_i the server sent) and
    Scaffnew.update (the average, each h_i row; a straggler, H = 0, is left out and keeps its h_i)."""
    m = method(**{"num-clients": 3, "local-lr": 0.5, "comm-prob": 0.25})
    n = m.init()["x"].size
    a = [np.full(n, 1.0), np.full(n, 3.0), np.full(n, 7.0)]
    h = np.stack([np.full(n, 0.5), np.full(n, -0.5), np.full(n, 2.0)])
    state = {"x": np.zeros(n), "h": h, "averaged_at": np.full(3, -2)}  # -2: every client is sent its h_i row
    works = [Work(pid, 0, 0 if pid == 2 else 1, m.downlink(state, 0, pid)) for pid in range(3)]
    replies = [scaffnew.client_work(m.cfg, _ConstantClients(a), None, w, {}) for w in works]
    np.testing.assert_allclose(replies[0].arrays["x"], 0.75)
    np.testing.assert_allclose(replies[1].arrays["x"], 1.25)
    np.testing.assert_array_equal(replies[2].arrays["x"], 0.0)  # the straggler took no step
    new, _ = m.update(state, RoundPlan(0, [0, 1, 2], [2], works), replies)
    np.testing.assert_allclose(new["x"], 1.0)
    np.testing.assert_allclose(new["h"][0], 0.625)
    np.testing.assert_allclose(new["h"][1], -0.625)
    np.testing.assert_array_equal(new["h"][2], 2.0)
    np.testing.assert_array_equal(state["h"][0], 0.5)  # the state passed in is not changed


def test_a_robust_rule_averages_the_x_hats_and_the_saved_state_drops_the_resume_marks():
    """With aggregation = median the server's x is the median of the x^_i (each h_i settled against it); the
    checkpoint leaves out averaged_at (a resumed run sends every client its h_i row: -2 on load)."""
    m = method(**{"num-clients": 3, "local-lr": 0.5, "comm-prob": 0.25, "aggregation": "median"})
    n = m.init()["x"].size
    state = {"x": np.zeros(n), "h": np.zeros((3, n)), "averaged_at": np.full(3, -1)}
    works = [Work(pid, 0, 1, m.downlink(state, 0, pid)) for pid in range(3)]
    x_hats = [np.full(n, 1.0), np.full(n, 5.0), np.full(n, 2.0)]
    replies = [scaffnew.Reply(pid, {"x": x_hats[pid]}, 10) for pid in range(3)]
    new, _ = m.update(state, RoundPlan(0, [0, 1, 2], [], works), replies)
    np.testing.assert_array_equal(new["x"], np.full(n, 2.0))  # the median, not the mean 8/3
    np.testing.assert_allclose(new["h"][1], control_update(np.zeros(n), new["x"], x_hats[1], 0.25, 0.5))
    assert new["averaged_at"].tolist() == [0, 0, 0]
    saved = m.state_dict(new)
    assert sorted(saved) == sorted(k for k in new if k != "averaged_at")
    assert m.load_state_dict(saved)["averaged_at"].tolist() == [-2, -2, -2]


def _least_squares(seed=0, n_clients=4, rows=20, d=3):
    rng = np.random.default_rng(seed)
    A = [rng.standard_normal((rows, d)) for _ in range(n_clients)]
    b = [Ai @ rng.standard_normal(d) * 3 + rng.standard_normal(rows) for Ai in A]  # a different optimum each
    grads = [lambda y, idx, Ai=Ai, bi=bi: Ai.T @ (Ai @ y - bi) / rows for Ai, bi in zip(A, b)]
    x_star = np.linalg.solve(sum(Ai.T @ Ai for Ai in A), sum(Ai.T @ bi for Ai, bi in zip(A, b)))
    L = max(np.linalg.eigvalsh(Ai.T @ Ai / rows).max() for Ai in A)
    return grads, x_star, L


def test_scaffnew_reaches_the_exact_optimum_where_local_gd_drifts():
    """Heterogeneous least squares, exact gradients, gamma = 1/L, p = 0.2: Scaffnew's average reaches
    x* = argmin (1/n) sum_i f_i to 1e-9 and its h_i become grad f_i(x*) (sum 0); local GD with the same
    step, 5 local steps and averaging (FedAvg) settles at a fixed point away from x* (client drift)."""
    grads, x_star, L = _least_squares()
    gamma, p = 1.0 / L, 0.2
    rng = np.random.default_rng(1)
    x, h = np.zeros(3), [np.zeros(3) for _ in grads]
    for _ in range(1500):
        steps = np.zeros((coin_steps(rng, p), 0), dtype=np.int64)
        x_hats = [local_steps(g, x, hi, steps, gamma) for g, hi in zip(grads, h)]
        x = communicate(x_hats)
        h = [control_update(hi, x, xh, p, gamma) for hi, xh in zip(h, x_hats)]
    assert np.linalg.norm(x - x_star) < 1e-9 * max(1.0, np.linalg.norm(x_star))
    for g, hi in zip(grads, h):
        np.testing.assert_allclose(hi, g(x_star, None), atol=1e-8)
    np.testing.assert_allclose(sum(h), 0.0, atol=1e-10)

    y = np.zeros(3)
    for _ in range(1500):
        y = np.mean([local_sgd(g, y, np.zeros((5, 0), dtype=np.int64), np.full(5, gamma)) for g in grads], axis=0)
    assert np.linalg.norm(y - x_star) > 1e-2  # local GD's fixed point is not x*
    y_next = np.mean([local_sgd(g, y, np.zeros((5, 0), dtype=np.int64), np.full(5, gamma)) for g in grads], axis=0)
    assert np.linalg.norm(y_next - y) < 1e-12  # ... and it has converged there


def test_the_strategy_learns_with_one_coin_per_round_and_resumes_bit_for_bit(tmp_path):
    cfg = {**SMALL, "num-rounds": 6, "checkpoint-every": 1, "output-dir": str(tmp_path)}
    d_ref, x_ref = run_inprocess({**cfg, "run-name": "ref"}, workers=0)
    rec = read_rounds(d_ref)
    m = method()
    for r in rec[1:]:  # every client took the round's K_r = the coin of (seed, r) steps
        assert r["H"] == m.round_H(None, r["round"] - 1) >= 1 and r["local_steps"] == r["H"] * r["participants"]
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3
    ckpt = np.load(d_ref / "checkpoint.npz")
    assert ckpt["mem/h"].shape == (4, x_ref.size) and np.abs(ckpt["mem/h"]).max() > 0  # h_i kept by the server
    np.testing.assert_allclose(ckpt["mem/h"].sum(axis=0), 0.0, atol=1e-9)  # every client in every round: sum 0
    run_inprocess({**cfg, "num-rounds": 3, "run-name": "cut"}, workers=0)
    d, x = run_inprocess({**cfg, "resume": True, "run-name": "cut"}, workers=0)
    np.testing.assert_array_equal(x, x_ref)
    keys = ("round", "test_loss", "H", "local_steps", "sampled")
    assert [[r.get(k) for k in keys] for r in read_rounds(d)] == [[r.get(k) for k in keys] for r in rec]


def test_partial_participation_is_warned_about():
    from zofl.config import config_warnings, parse_config

    assert "strategy 'scaffnew' with beta < 1" in " ".join(config_warnings(parse_config(
        {"strategy": "scaffnew", "beta": 0.5})))
    assert not any("scaffnew" in w for w in config_warnings(parse_config({"strategy": "scaffnew", "beta": 1.0})))
    def warned(**keys):
        return config_warnings(parse_config({"strategy": "scaffnew", **keys}))

    assert warned(beta=1.0, **{"straggler-prob": 1.0}) == [
        "run-config key 'straggler-prob' = 1: every sampled client is a straggler in every round, so no Scaffnew "
        "client ever takes a step; use a value below 1"]
    assert warned(beta=0.5) == [
        "strategy 'scaffnew' with beta < 1: ProxSkip's Algorithm 2 has every client in every communication; here the "
        "sampled clients' x^_i are averaged and only their h_i move (ours, docs/baselines.md)"]


def test_each_client_settles_its_own_h_i_and_is_sent_the_servers_copy_only_when_it_cannot():
    """Three clients, rounds 0-2 by hand, each client's Context a dict. Round 0: x alone (every h_i starts at 0).
    Round 0's straggler (client 2) and a client left out of round 1 (client 1) are sent the server's copy of their
    h_i the round after; a client averaged in the round before gets x alone and settles its h_i itself, to the
    server's copy bit for bit. A client told to settle whose Context lost its x^_i refuses the work, named."""
    m = method(**{"num-clients": 3, "local-lr": 0.5, "comm-prob": 0.25})
    n = m.init()["x"].size
    task = _ConstantClients([np.full(n, 1.0), np.full(n, 3.0), np.full(n, 7.0)])
    contexts = [{}, {}, {}]
    state = m.init()

    def round_(r, sampled, stragglers=()):
        nonlocal state
        works = [Work(pid, r, 0 if pid in stragglers else 1, m.downlink(state, r, pid)) for pid in sampled]
        sent = {w.pid: sorted(w.arrays) for w in works}
        replies = [scaffnew.client_work(m.cfg, task, None, w, contexts[w.pid]) for w in works]
        state, _ = m.update(state, RoundPlan(r, list(sampled), list(stragglers), works), replies)
        return sent

    assert round_(0, [0, 1, 2], stragglers=[2]) == {0: ["x"], 1: ["x"], 2: ["x"]}
    assert round_(1, [0, 2]) == {0: ["x"], 2: ["h_i_server", "x"]}  # 2 was a straggler: nothing to settle
    assert round_(2, [0, 1, 2]) == {0: ["x"], 1: ["h_i_server", "x"], 2: ["x"]}  # 1 missed x_2
    assert np.all(state["averaged_at"] == 2) and np.abs(state["h"]).min() > 0
    for pid in range(3):  # each client's h_i settled by x_3 on its side = the server's copy, bit for bit
        settled = control_update(contexts[pid]["h_i"], state["x"], contexts[pid]["x_hat"], 0.25, 0.5)
        np.testing.assert_array_equal(settled, state["h"][pid])
    with pytest.raises(ValueError, match="settle its h_i from its x\\^_i of round 2"):
        scaffnew.client_work(m.cfg, task, None, Work(0, 3, 1, m.downlink(state, 3, 0)), {})
    resumed = m.load_state_dict(m.state_dict(state))
    assert all("h_i_server" in m.downlink(resumed, 3, pid) for pid in range(3))
