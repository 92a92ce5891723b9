"""Robust aggregation (zofl.algorithms.robust) and hostile clients (zofl.faults.hostile_reply): the
rules as pure functions, the attacks, and in-process runs where one hostile client of ten wrecks the
papers' mean and not a robust rule."""
import json
import re

import numpy as np
import pytest

from zofl.algorithms.robust import clip_coefficients, robust_combine
from zofl.config import ConfigError, parse_config
from zofl.core.checks import reply_problem
from zofl.faults import hostile_reply
from zofl.inprocess import run_inprocess

V = [np.array([1.0, 10.0]), np.array([2.0, 20.0]), np.array([3.0, 30.0]), np.array([100.0, -1e5])]


def test_rules():
    np.testing.assert_array_equal(robust_combine(V, "mean"), np.mean(V, axis=0))
    np.testing.assert_allclose(robust_combine(V, "mean", weights=[0.5, 0.5, 0, 0]), [1.5, 15.0])
    np.testing.assert_array_equal(robust_combine(V, "median"), [2.5, 15.0])
    np.testing.assert_array_equal(robust_combine(V, "trimmed-mean", trim=0.25), [2.5, 15.0])  # drops 1 per end
    k = robust_combine(V, "krum", krum_f=1)  # one of the honest vectors (its nearest other is closest)
    assert any(np.array_equal(k, v) for v in V[:3])
    np.testing.assert_array_equal(robust_combine(V, "median", weights=[0.1] * 4), [1.0, 6.0])  # x sum of weights
    with pytest.raises(ValueError, match="aggregation must be one of"):
        robust_combine(V, "mode")


def test_the_rules_defaults_and_their_precision():
    """robust_combine's defaults: trim 0.2 (2 of 10 dropped per end) and Krum's f = 1 (each vector scored on its
    n - f - 2 = 2 nearest others: 5 is chosen of [4, 5, 7, 9, 0], where f = 2 would choose 4); every rule but the
    plain mean works in float64 whatever the replies' dtype; no vectors is an error naming the function."""
    ten = [np.array([float(v)]) for v in (-1e6, -50.0, 1, 2, 3, 4, 5, 6, 70.0, 1e6)]
    np.testing.assert_array_equal(robust_combine(ten, "trimmed-mean"), [3.5])  # mean of 1..6
    np.testing.assert_array_equal(robust_combine([np.array([v]) for v in (4.0, 5.0, 7.0, 9.0, 0.0)], "krum"), [5.0])
    f32 = [np.array([0.1], dtype=np.float32), np.array([0.2], dtype=np.float32), np.array([0.7], dtype=np.float32)]
    out = robust_combine(f32, "median")
    assert out.dtype == np.float64 and out[0] == float(np.float32(0.2))
    assert robust_combine(f32, "trimmed-mean", trim=0.0).dtype == np.float64
    with pytest.raises(ValueError, match="^robust_combine: no vectors$"):
        robust_combine([], "median")


def test_coefficients_are_clipped_at_a_multiple_of_the_median_magnitude():
    coefs = {0: np.array([1.0, -2.0]), 1: np.array([3.0]), 2: np.array([-1e6])}
    out = clip_coefficients(coefs, 2.0)  # median |c| = 2.5, bound 5
    assert [list(v) for v in out.values()] == [[1.0, -2.0], [3.0], [-5.0]]
    assert clip_coefficients(coefs, 0.0) is coefs


def test_hostile_replies_in_float64_seeded_per_round_and_client_and_by_name_and_shape():
    """hostile_reply works in float64 whatever the reply's dtype; "large"'s signs come from the attack's own stream of
    (seed, round, client); an update is taken against what was sent under the same name and shape only (another
    shape: the values themselves); "scale" multiplies the update; an unknown attack names the choices."""
    from zofl.algorithms.smoothing import seed_sequence
    from zofl.faults import ATTACKS, STREAM_ATTACK

    sent = {"x": np.array([1.0, 1.0], dtype=np.float32), "f": np.zeros(3)}
    honest = {"x": np.array([3.0, -2.0], dtype=np.float32), "f": np.array([[0.5], [0.25]], dtype=np.float32)}
    scaled = hostile_reply(sent, honest, "scale", 10.0, 1e6, 0, 3, 1)
    np.testing.assert_array_equal(scaled["x"], [21.0, -29.0])  # 1 + 10 (3 - 1), 1 + 10 (-2 - 1)
    np.testing.assert_array_equal(scaled["f"], [[5.0], [2.5]])  # a sent "f" of another shape is no counterpart
    assert all(v.dtype == np.float64 for v in scaled.values())
    flip = hostile_reply({}, honest, "sign-flip", 1.0, 1e6, 0, 3, 1)
    assert flip["f"].dtype == np.float64 and flip["f"].tolist() == [[-0.5], [-0.25]]
    big = {"x": np.zeros(64)}
    signs = np.random.default_rng(seed_sequence(7, 3, 1, STREAM_ATTACK)).choice([-1.0, 1.0], size=64)
    np.testing.assert_array_equal(hostile_reply({}, big, "large", 1.0, 2.0, 7, 3, 1)["x"], 0.99 * 2.0 * signs)
    others = [hostile_reply({}, big, "large", 1.0, 2.0, *args)["x"] for args in ((8, 3, 1), (7, 4, 1), (7, 3, 2))]
    assert all(not np.array_equal(o, 0.99 * 2.0 * signs) for o in others)  # seed, round and client each count
    with pytest.raises(ValueError, match=rf"^attack must be one of {re.escape(str(ATTACKS))}, got 'noise'$"):
        hostile_reply({}, big, "noise", 1.0, 2.0, 7, 3, 1)


def test_hostile_replies():
    sent, honest = {"x": np.array([1.0, 1.0])}, {"x": np.array([2.0, 0.0]), "f": np.array([[0.5], [0.2]])}
    flip = hostile_reply(sent, honest, "sign-flip", 10.0, 1e6, 0, 3, 1)
    np.testing.assert_array_equal(flip["x"], [0.0, 2.0])  # the update (1, -1) negated around what was sent
    np.testing.assert_array_equal(flip["f"], [[-0.5], [-0.2]])  # no counterpart sent: the values negated
    np.testing.assert_array_equal(hostile_reply(sent, honest, "scale", 10.0, 1e6, 0, 3, 1)["x"], [11.0, -9.0])
    large = hostile_reply(sent, honest, "large", 10.0, 1e6, 0, 3, 1)
    assert np.all(np.abs(large["x"]) == 0.99e6)
    assert reply_problem(list(large.values()), [(2,), (2, 1)], 1e6) is None  # it passes the server's checks
    with pytest.raises(ConfigError, match="'hostile-clients' names clients \\[10\\]"):
        parse_config({"hostile-clients": "1,10", "attack": "large"})
    with pytest.raises(ConfigError, match="attack = 'none'"):
        parse_config({"hostile-clients": "1"})


@pytest.mark.parametrize("strategy,defences", [("fedavg", ["median", "trimmed-mean", "krum"]),
                                               ("zohfl", ["median", "coef-clip"])])
def test_one_hostile_client_of_ten_wrecks_the_mean_and_not_a_robust_rule(tmp_path, strategy, defences):
    base = {"strategy": strategy, "num-rounds": 15, "num-clients": 10, "beta": 1.0, "tau": 2.0,
            "hostile-clients": "3", "attack": "large", "output-dir": str(tmp_path)}

    def final(name, **keys):
        d, x = run_inprocess({**base, "run-name": name, **keys}, workers=0)
        s = json.loads((d / "summary.json").read_text())
        assert s["total_rejected"] == 0  # the hostile replies pass every check
        return s["initial_test_acc"], s["final_test_acc"]

    x0, wrecked = final("mean")
    assert wrecked < 0.3 < x0
    for rule in defences:
        keys = {"coef-clip": 3.0} if rule == "coef-clip" else {"aggregation": rule}
        assert final(rule, **keys)[1] >= x0 - 0.02, rule


@pytest.mark.parametrize("n", [3, 4, 7, 10])
def test_rules_equal_flowers_implementations(n):
    """The core's rules (Flower-free) compute what Flower's aggregate_* functions compute, bit for bit."""
    from flwr.server.strategy.aggregate import aggregate_krum, aggregate_median, aggregate_trimmed_avg
    rng = np.random.default_rng(n)
    vs = [rng.normal(size=(5, 3)) * (100 if i == 0 else 1) for i in range(n)]
    results = [([v], 1) for v in vs]
    np.testing.assert_array_equal(robust_combine(vs, "median"), aggregate_median(results)[0])
    for trim in (0.0, 0.1, 0.2, 0.3, 0.49):
        np.testing.assert_array_equal(robust_combine(vs, "trimmed-mean", trim=trim),
                                      aggregate_trimmed_avg(results, proportiontocut=trim)[0])
    for f in (0, 1, 2, 5):
        np.testing.assert_array_equal(robust_combine(vs, "krum", krum_f=f),
                                      aggregate_krum(results, num_malicious=f, to_keep=0)[0])


def test_afbo_median_over_all_slots_survives_a_hostile_first_update(tmp_path):
    """AFBO's robust rule runs over all m stored slots (never-heard clients count 0): over the clients
    heard from, the first steps combined 1 or 2 updates, and one hostile first update wrecked y."""
    base = {"strategy": "afbo", "engine": "async", "task": "hyper-cleaning", "num-rounds": 50, "num-clients": 10,
            "beta": 1.0, "hostile-clients": "0", "attack": "large", "output-dir": str(tmp_path),
            "checkpoint-every": 0}
    acc = {}
    for rule in ("mean", "median"):
        d, _ = run_inprocess({**base, "aggregation": rule, "run-name": rule}, workers=0)
        acc[rule] = json.loads((d / "summary.json").read_text())["final_test_acc"]
    assert acc["mean"] < 0.3 < 0.6 < acc["median"], acc


def test_a_robust_rule_over_fewer_than_three_updates_is_warned_about():
    from zofl.config import config_warnings
    fedbuff = {"strategy": "fedbuff", "engine": "async", "aggregation": "median"}
    warned = " ".join(config_warnings(parse_config(fedbuff)))
    assert "(buffer-size); a robust rule" in warned and "raise buffer-size so" in warned
    assert "raise beta" in " ".join(config_warnings(parse_config({"strategy": "fedavg", "aggregation": "krum",
                                                                   "beta": 0.2})))
    assert config_warnings(parse_config({"strategy": "fedavg", "aggregation": "median"})) == []
    assert config_warnings(parse_config({"strategy": "fedbuff", "engine": "async", "buffer-size": 2})) == []
    # AFBO's step combines every client's latest update: num-clients sets how many, not beta (it samples nobody)
    afbo = " ".join(config_warnings(parse_config({"strategy": "afbo", "engine": "async", "aggregation": "median",
                                                  "num-clients": 2})))
    assert "combines 2 client update(s) per server step (num-clients)" in afbo and "raise num-clients so" in afbo


@pytest.mark.parametrize("strategy", ["fedmspp", "fedrzo-nn"])
def test_the_averaging_methods_combine_the_clients_models_through_the_robust_rule(strategy):
    """FedMSPP's and FedRZO_nn's server step: x_{r+1} = the mean of the clients' x_i, or, with aggregation =
    median, their coordinate median (one hostile reply of three moves it nowhere)."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Reply, Work
    from zofl.methods import METHODS
    from zofl.setup import prepare

    def step(rule):
        cfg, task, spec = prepare({"strategy": strategy, "num-clients": 3, "beta": 1.0, "aggregation": rule})
        method = METHODS[strategy].server(cfg, task, spec)
        state = method.init()
        n = state["x"].size
        xs = [np.full(n, 1.0), np.full(n, 2.0), np.full(n, 1e6)]
        works = [Work(p, 0, 2, {"x": state["x"]}) for p in range(3)]
        plan = RoundPlan(r=0, sampled=[0, 1, 2], stragglers=[], works=works)
        return method.update(state, plan, [Reply(p, {"x": x}, 10) for p, x in enumerate(xs)])[0]["x"]

    assert np.all(step("median") == 2.0)
    assert np.all(step("mean") > 1e5)
