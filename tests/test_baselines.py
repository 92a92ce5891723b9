"""FedAvg, FedProx, SCAFFOLD: the pure functions, and the strategies in-process."""
import numpy as np
import pytest

from zofl.algorithms.fedavg import local_lrs, local_sgd, scaffold_client_control, scaffold_server_update, weighted_mean
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

SMALL = {"num-rounds": 5, "num-clients": 5, "tau": 3.0, "beta": 0.6, "seed": 3, "x0": "zeros"}


def test_local_lrs():
    np.testing.assert_allclose(local_lrs("constant", 0.1, 3, 2), [0.1, 0.1])
    np.testing.assert_allclose(local_lrs("round-sqrt", 0.1, 3, 2), [0.05, 0.05])
    np.testing.assert_allclose(local_lrs("step", 0.1, 3, 3), [0.1, 0.05, 0.1 / 3])
    with pytest.raises(ValueError):
        local_lrs("cosine", 0.1, 0, 1)


def _quad(seed=0):
    c = np.random.default_rng(seed).standard_normal((40, 3)) + 5.0
    return c, (lambda y, idx: y - c[idx].mean(axis=0))


def test_local_sgd_fedavg_fedprox_scaffold():
    c, grad = _quad()
    x = np.zeros(3)
    batches = np.tile(np.arange(40), (200, 1))  # full batches: deterministic
    lrs = np.full(200, 0.1)
    np.testing.assert_allclose(local_sgd(grad, x, batches, lrs), c.mean(axis=0), atol=1e-6)  # the optimum
    prox = local_sgd(grad, x, batches, lrs, prox_mu=1.0)
    np.testing.assert_allclose(prox, c.mean(axis=0) / 2, atol=1e-6)  # argmin 0.5||y-c||^2 + 0.5||y-x||^2
    corr = local_sgd(grad, x, batches, lrs, correction=np.ones(3))
    np.testing.assert_allclose(corr, c.mean(axis=0) - 1, atol=1e-6)
    np.testing.assert_array_equal(local_sgd(grad, x, batches[:0], lrs[:0]), x)  # K = 0


def test_scaffold_updates():
    x, y, c, c_i = np.zeros(2), np.array([1.0, -2.0]), np.array([0.5, 0.5]), np.array([0.1, 0.2])
    np.testing.assert_allclose(scaffold_client_control(c_i, c, x, y, 0.5), c_i - c + (x - y) / 0.5)
    np.testing.assert_array_equal(scaffold_client_control(c_i, c, x, y, 0.0), c_i)
    x2, c2 = scaffold_server_update(x, c, [y, -y], [np.ones(2), 3 * np.ones(2)], 1.0, 4)
    np.testing.assert_allclose(x2, 0.0)
    np.testing.assert_allclose(c2, c + 0.5 * 2.0)
    np.testing.assert_allclose(weighted_mean([np.ones(2), 3 * np.ones(2)], [1, 3]), 2.5 * np.ones(2))


@pytest.mark.parametrize("strategy", ["fedavg", "fedprox", "scaffold", "fedmspp"])
def test_baselines_learn_and_do_the_same_local_work_as_zohfl(strategy, tmp_path):
    d, x = run_inprocess({**SMALL, "strategy": strategy, "output-dir": str(tmp_path), "run-name": strategy},
                         workers=0)
    rec = read_rounds(d)
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3 and np.isfinite(x).all()
    z, _ = run_inprocess({**SMALL, "output-dir": str(tmp_path), "run-name": "zohfl-" + strategy}, workers=0)
    for a, b in zip(rec[1:], read_rounds(z)[1:]):
        assert a["local_steps"] == b["local_steps"] and a["sampled"] == b["sampled"]  # 2 H per client


def test_scaffold_keeps_client_control_variates_across_rounds(tmp_path, monkeypatch):
    from zofl import methods
    from zofl.methods import MethodEntry, scaffold

    seen, before, after, sent = [], {}, {}, {}

    def spy(cfg, task, spec, work, state):
        seen.append((work.round, work.pid, "c_i" in state))
        before[work.round, work.pid] = np.array(state["c_i"], copy=True) if "c_i" in state else None
        reply = scaffold.client_work(cfg, task, spec, work, state)
        after[work.round, work.pid] = np.array(state["c_i"], copy=True)
        sent[work.round, work.pid] = reply.arrays["dc"]
        return reply

    monkeypatch.setitem(methods.METHODS, "scaffold", MethodEntry(scaffold.Scaffold, spy))
    run_inprocess({**SMALL, "beta": 1.0, "strategy": "scaffold", "output-dir": str(tmp_path), "run-name": "s"},
                  workers=0)
    # every client in every round (beta = 1), with no state in round 0 and its c_i in every later round...
    assert sorted(seen) == [(r, p, r > 0) for r in range(SMALL["num-rounds"]) for p in range(SMALL["num-clients"])]
    for r in range(1, SMALL["num-rounds"]):
        for p in range(SMALL["num-clients"]):  # ...the very c_i the client left in the round before
            np.testing.assert_array_equal(before[r, p], after[r - 1, p])
            np.testing.assert_array_equal(after[r, p], before[r, p] + sent[r, p])  # used, and moved by Delta c_i
    assert all(np.abs(after[0, p]).max() > 0 for p in range(SMALL["num-clients"]))  # and it moved


def test_peer_cross_check_fedavg_vs_flowers_fedavg(tmp_path):
    acc, down = {}, {}
    for s in ("fedavg", "flwr-fedavg"):
        d, _ = run_inprocess({**SMALL, "num-rounds": 8, "beta": 1.0, "strategy": s, "output-dir": str(tmp_path),
                              "run-name": s}, workers=0)
        acc[s] = read_rounds(d)[-1]["test_acc"]
        down[s] = [r["downlink_bytes"] for r in read_rounds(d)[1:]]
    assert abs(acc["fedavg"] - acc["flwr-fedavg"]) <= 0.005, acc
    assert down["flwr-fedavg"] == down["fedavg"] == [5 * 640 * 8] * 8  # Flower's FedAvg sends each client the model


def test_flowers_fedavg_waits_for_every_supernode_before_it_samples():
    """flwr-fedavg is Flower's own FedAvg, set as zofl's rounds need: it samples beta m clients only once all m
    SuperNodes are there (Flower's default waits for 2, so a deployment's late nodes would miss the first rounds),
    on either API; the legacy one aggregates a round with failures (counted in the record)."""
    from types import SimpleNamespace

    from zofl.config import parse_config
    from zofl.strategies.flwr_fedavg import FlowerFedAvg, LegacyFlowerFedAvg

    run = SimpleNamespace(cfg=parse_config({"strategy": "flwr-fedavg", "num-clients": 7, "beta": 0.5}))
    message, legacy = FlowerFedAvg(run, fed=None), LegacyFlowerFedAvg(run, fed=None)
    assert (message.min_available_nodes, message.fraction_train) == (7, 0.5)
    assert (legacy.min_available_clients, legacy.fraction_fit, legacy.accept_failures) == (7, 0.5, True)


def test_a_scaffold_client_that_lost_its_c_i_takes_the_servers_copy_and_goes_on_exactly():
    """SCAFFOLD's client half: with its state gone (a restarted node) it starts from the server's copy of c_i when
    the work carries one (the first round after a resume), and gives the reply and the new c_i the client with
    that c_i in its state gives, bit for bit; without either, c_i = 0."""
    from zofl.core.protocol import Work
    from zofl.methods.scaffold import client_work
    from zofl.setup import prepare
    from zofl.tasks.base import data_shape

    cfg, task, spec = prepare({"strategy": "scaffold", "num-clients": 3, "local-steps": 2, "seed": 5})
    rng = np.random.default_rng(1)
    n = np.asarray(task.init_params(*data_shape(task, spec))).size
    x, c, c_i = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
    kept = {"c_i": c_i.copy()}
    a = client_work(cfg, task, spec, Work(1, 3, 2, {"x": x, "c": c}), kept)
    lost: dict = {}
    b = client_work(cfg, task, spec, Work(1, 3, 2, {"x": x, "c": c, "c_i_server": c_i.copy()}), lost)
    assert all(np.array_equal(a.arrays[k], b.arrays[k]) for k in ("dy", "dc"))
    np.testing.assert_array_equal(lost["c_i"], kept["c_i"])
    fresh: dict = {}
    z = client_work(cfg, task, spec, Work(1, 3, 2, {"x": x, "c": c}), fresh)
    zero = client_work(cfg, task, spec, Work(1, 3, 2, {"x": x, "c": c}), {"c_i": np.zeros(n)})
    assert all(np.array_equal(z.arrays[k], zero.arrays[k]) for k in ("dy", "dc"))
    assert not np.array_equal(z.arrays["dy"], a.arrays["dy"])


def test_scaffolds_server_keeps_each_c_i_as_the_sum_of_its_accepted_deltas_and_sends_it_after_a_resume():
    """SCAFFOLD's server half (zofl.methods.scaffold.Scaffold): x and c by scaffold_server_update over the replies;
    its copy of client i's c_i is the sum of the Delta c_i it accepted (client 0 twice); a saved state drops the
    resume flags, a loaded one marks every client, whose next work carries its copy (``c_i_server``) until it has
    replied once; with a robust rule, one robust Delta y and Delta c stand for every reply."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Reply
    from zofl.methods.scaffold import Scaffold
    from zofl.setup import prepare

    cfg, task, spec = prepare({"strategy": "scaffold", "num-clients": 3, "local-steps": 2, "seed": 5,
                               "server-lr": 0.5})
    method = Scaffold(cfg, task, spec)
    state = method.init()
    n = state["x"].size
    assert state["c_clients"].shape == (3, n) and state["unrestored"].dtype == bool and not state["unrestored"].any()
    assert sorted(method.downlink(state, 0, 1)) == ["c", "x"]
    rng = np.random.default_rng(3)
    dy0, dc0, dy2, dc2, dy0b, dc0b, dy1, dc1 = rng.standard_normal((8, n))

    def rep(pid, dy, dc):
        return Reply(pid, {"dy": dy, "dc": dc}, 10)

    s1, _ = method.update(state, RoundPlan(0, [0, 2], [], []), [rep(0, dy0, dc0), rep(2, dy2, dc2)])
    x1, c1 = scaffold_server_update(state["x"], state["c"], [dy0, dy2], [dc0, dc2], 0.5, 3)
    np.testing.assert_array_equal(s1["x"], x1)
    np.testing.assert_array_equal(s1["c"], c1)
    np.testing.assert_array_equal(s1["c_clients"], [dc0, np.zeros(n), dc2])
    s2, _ = method.update(s1, RoundPlan(1, [0], [], []), [rep(0, dy0b, dc0b)])
    np.testing.assert_array_equal(s2["c_clients"][0], dc0 + dc0b)
    saved = method.state_dict(s2)
    assert "unrestored" not in saved and sorted(saved) == sorted(k for k in s2 if k != "unrestored")
    restored = method.load_state_dict(saved)
    assert restored["unrestored"].tolist() == [True, True, True]
    np.testing.assert_array_equal(method.downlink(restored, 2, 1)["c_i_server"], s2["c_clients"][1])
    s3, _ = method.update(restored, RoundPlan(2, [1], [], []), [rep(1, dy1, dc1)])
    assert s3["unrestored"].tolist() == [True, False, True] and "c_i_server" not in method.downlink(s3, 3, 1)
    np.testing.assert_array_equal(method.downlink(s3, 3, 2)["c_i_server"], s2["c_clients"][2])
    cfg, task, spec = prepare({"strategy": "scaffold", "num-clients": 3, "local-steps": 2, "seed": 5,
                               "server-lr": 0.5, "aggregation": "median"})
    robust = Scaffold(cfg, task, spec)
    r1, _ = robust.update(state, RoundPlan(0, [0, 1, 2], [], []), [rep(0, dy0, dc0), rep(1, dy1, dc1),
                                                                    rep(2, dy2, dc2)])
    med_y, med_c = np.median([dy0, dy1, dy2], axis=0), np.median([dc0, dc1, dc2], axis=0)
    want_x, want_c = scaffold_server_update(state["x"], state["c"], [med_y] * 3, [med_c] * 3, 0.5, 3)
    np.testing.assert_allclose(r1["x"], want_x)
    np.testing.assert_allclose(r1["c"], want_c)
    np.testing.assert_array_equal(r1["c_clients"], [dc0, dc1, dc2])  # each its own, not the robust one
    # a server optimizer (ours: server-optimizer) steps with mean Delta y as its pseudo-gradient, its step numbered
    # from 1 (Adam's bias correction): round r's is step r + 1
    cfg, task, spec = prepare({"strategy": "scaffold", "num-clients": 3, "local-steps": 2, "seed": 5,
                               "server-lr": 0.5, "server-optimizer": "adam"})
    adam = Scaffold(cfg, task, spec)
    a0 = adam.init()
    a1, _ = adam.update(a0, RoundPlan(0, [0, 2], [], []), [rep(0, dy0, dc0), rep(2, dy2, dc2)])
    np.testing.assert_array_equal(a1["x"], adam.server_step(a0, np.mean([dy0, dy2], axis=0), 0.5, 1)["x"])
    a2, _ = adam.update(a1, RoundPlan(1, [0], [], []), [rep(0, dy0b, dc0b)])
    np.testing.assert_array_equal(a2["x"], adam.server_step(a1, np.mean([dy0b], axis=0), 0.5, 2)["x"])
    assert not np.array_equal(a2["x"], adam.server_step(a1, np.mean([dy0b], axis=0), 0.5, 3)["x"])
