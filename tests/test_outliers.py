"""Replies far outside their round's spread (zofl.algorithms.outliers): flagged per round in the record,
counted in the summary, and under the papers' mean a warning naming the client and pointing to the robust
rules; the pure function on hand-made rounds, then cheap in-process runs (honest non-IID: silent; one
hostile client under the mean: warned; under the median: counted, not warned; the asynchronous engine)."""
import json
from types import SimpleNamespace

import numpy as np
import pytest

from zofl.algorithms.outliers import far_replies, spread_ratios
from zofl.config import parse_config
from zofl.core.summary import OUTLIER_ROUNDS, defence, outlier_warning
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds


def f(*pairs):
    """ZO-HFL replies with uplink = scalars: f = (f+, f-) per client, one direction."""
    return [{"f": np.array([[a], [b]])} for a, b in pairs]


def test_a_huge_reply_is_flagged_and_honest_heterogeneity_is_not():
    honest = [(1.68, 1.65), (1.74, 1.75), (2.19, 2.22), (0.60, 0.61), (1.03, 1.01)]
    assert far_replies(f(*honest)) == []
    assert far_replies(f(*honest, (0.99e6, -0.99e6))) == [5]
    assert far_replies(f((0.99e6, 0.99e6), *honest)) == [0]
    # measured in an honest alpha = 0.1 ZO-HFL round with stragglers: four clients agree to 0.05, an honest
    # straggler (zeros) and a client of another f2 level lie 6-14 times their spread away; the floor of
    # half the typical reply's size keeps them in
    assert far_replies(f((0.0, 0.0), (1.08, 1.09), (1.57, 1.56), (1.51, 1.52), (1.45, 1.48))) == []
    assert far_replies(f((1.52, 1.53), (2.22, 2.19), (1.52, 1.54), (1.50, 1.50), (1.47, 1.44))) == []
    # stragglers' zero replies are a majority: the spread is that of the others, not 0
    assert far_replies(f((1.03, 1.01), (0, 0), (0.88, 0.89), (0, 0), (0, 0))) == []
    assert far_replies(f((1.03, 1.01), (0, 0), (0.88, 0.89), (0, 0), (0, 0), (40.0, 1.0))) == [5]


def test_too_few_or_identical_replies_say_nothing():
    assert far_replies([]) == []
    assert far_replies(f((1.0, 1.0))) == []
    assert far_replies(f((1.0, 1.0), (1e6, 1e6))) == []  # of two, neither is the odd one
    assert far_replies(f((1.0, 1.0), (1.0, 1.0), (1.0, 1.0))) == []  # no spread at all
    assert spread_ratios(f((1.0, 1.0), (1e6, 1e6))) == {}


def test_model_replies_are_read_as_updates_from_what_was_sent():
    rng = np.random.default_rng(0)
    x = 100.0 * rng.normal(size=20)  # the model: much larger than any client's update
    deltas = [rng.normal(size=20) for _ in range(6)]
    deltas[2] = 30.0 * deltas[2]  # one update 30 times the others (attack = scale)
    replies = [{"x": x + d} for d in deltas]
    sent = [{"x": x}] * len(replies)
    assert far_replies(replies, sent) == [2]
    assert far_replies(replies) == []  # read as models, the update hides in the model's size


def test_replies_of_different_layouts_are_judged_apart():
    g = [{"G": np.full(3, v)} for v in (1.0, 1.1, 0.9, 50.0)]
    h = [{"H": np.full((2, 2), v)} for v in (1.0, 1e5)]  # two of a kind: nothing to say
    assert far_replies(g + h) == [3]


def record(rnd, sampled, outliers, failed=()):
    return {"round": rnd, "sampled": sampled, "failed_clients": list(failed), "outliers": outliers}


def test_the_warning_needs_a_client_flagged_in_enough_of_its_rounds():
    every = list(range(10))
    rounds = [record(r, every, [3] if r < 4 else []) for r in range(20)]  # 4 of 20: 20%
    line = outlier_warning(rounds, None, clip=True)
    assert line.startswith("warning: replies of client(s) 3 (4 of 20 rounds) lay far outside their rounds' spread")
    assert 'try aggregation = "median" or coef-clip (docs/robustness.md)' in line
    assert outlier_warning(rounds[:3] + rounds[4:], None) is None  # 3 of 19: below 20%
    assert outlier_warning(rounds, 'aggregation = "median"') is None  # a robust rule: no alarm
    assert "trimmed-mean" in outlier_warning(rounds, None)
    # a client sampled in few rounds counts by the rounds that used its reply
    few = [record(r, [3, 4, 5] if r < OUTLIER_ROUNDS else [4, 5, 6], [3] if r < OUTLIER_ROUNDS else [])
           for r in range(30)]
    assert "client(s) 3 (3 of 3 rounds)" in outlier_warning(few, None)
    assert outlier_warning(few[:2] + few[3:], None) is None  # flagged twice: not enough


def test_the_rule_in_force():
    assert defence(parse_config({}), True) is None
    assert defence(parse_config({"aggregation": "median"}), True) == 'aggregation = "median"'
    assert defence(parse_config({"coef-clip": 3.0}), True) == "coef-clip = 3"
    assert defence(parse_config({"coef-clip": 0.5}), True) == "coef-clip = 0.5"  # any clip above 0 acts
    assert defence(parse_config({"strategy": "fedavg", "coef-clip": 3.0}), False) is None  # a method that clips nothing
    from zofl.methods.zohfl import ZOHFL  # which methods clip: their own property

    two_point, envelope = (ZOHFL.clips_coefficients.fget(SimpleNamespace(hp=SimpleNamespace(estimator=e)))
                           for e in ("two-point", "envelope"))
    assert two_point and not envelope  # the envelope estimate has no coefficients


BASE = {"num-rounds": 6, "num-clients": 10, "beta": 1.0, "tau": 2.0}


def run(tmp_path, name, capsys, **keys):
    d, _ = run_inprocess({**BASE, **keys, "output-dir": str(tmp_path), "run-name": name}, workers=0)
    return read_rounds(d), json.loads((d / "summary.json").read_text()), capsys.readouterr().out


@pytest.mark.parametrize("keys", [{"num-rounds": 10}, {"num-rounds": 20, "beta": 0.5, "straggler-prob": 0.3}])
def test_honest_non_iid_clients_raise_no_warning(tmp_path, capsys, keys):
    # ZO-HFL at alpha = 0.1, all clients every round, or half of them with stragglers (zero replies)
    recs, s, out = run(tmp_path, "honest", capsys, alpha=0.1, **keys)
    assert all(r["outliers"] == [] for r in recs)
    assert s["total_outlier_replies"] == 0 and s["outliers_by_client"] == {} and s["outlier_warning"] is None
    assert "far outside" not in out and "warning" not in out


def test_one_hostile_client_under_the_mean_is_named_in_the_warning(tmp_path, capsys):
    recs, s, out = run(tmp_path, "mean", capsys, **{"hostile-clients": "3", "attack": "large"})
    assert [r["outliers"] for r in recs] == [[]] + [[3]] * 6
    assert s["total_outlier_replies"] == 6 and s["outliers_by_client"] == {"3": 6} and s["robust_rule"] is None
    warning = [ln for ln in out.splitlines() if "warning:" in ln]
    assert len(warning) == 1 and warning[0] == "  " + s["outlier_warning"]
    assert warning[0].startswith("  warning: replies of client(s) 3 (6 of 6 rounds) lay far outside their rounds' "
                                 "spread; under aggregation = \"mean\" one hostile client can move the model")
    assert s["final_test_acc"] < 0.3  # the run itself is what it was: wrecked


def test_under_a_robust_rule_the_count_is_reported_without_the_alarm(tmp_path, capsys):
    recs, s, out = run(tmp_path, "median", capsys, aggregation="median", **{"hostile-clients": "3", "attack": "large"})
    assert [r["outliers"] for r in recs] == [[]] + [[3]] * 6
    assert s["outliers_by_client"] == {"3": 6} and s["outlier_warning"] is None
    assert "  replies far outside their rounds' spread: 6, by client (rounds): 3 (6); limited by aggregation = " \
           "\"median\"" in out.splitlines()
    assert "warning" not in out and s["final_test_acc"] > 0.4


@pytest.mark.parametrize("aggregation", ["mean", "median"])
def test_the_asynchronous_engine_flags_a_hostile_reply_in_its_buffer(tmp_path, capsys, aggregation):
    recs, s, out = run(tmp_path, aggregation, capsys, strategy="fedbuff", engine="async", aggregation=aggregation,
                       **{"buffer-size": 5, "local-steps": 2, "num-rounds": 8, "hostile-clients": "3",
                          "attack": "large"})
    flagged = [r for r in recs[1:] if r["outliers"]]
    assert flagged and all(r["outliers"] == [3] and 3 in r["clients"] for r in flagged)
    assert all(r["outliers"] == [] for r in recs[1:] if 3 not in r["clients"])
    assert s["outliers_by_client"] == {"3": len(flagged)}
    assert ("warning: replies of client(s) 3" in out) == (aggregation == "mean")
    assert "updates' spread" in out


def test_an_update_counts_the_replies_it_used_not_those_it_held():
    """AFBO's ``clients`` lists every reply accepted since the last step, held ones included; what a step
    used is its ``used`` list (tests/test_async_records.py), and only that counts as a use."""
    from zofl.core.summary import used_rounds

    records = [{"clients": [4, 3, 0, 4, 3, 0], "used": [{"client": 4}, {"client": 3}, {"client": 0}]},
               {"clients": [1, 2], "used": [{"client": 2}]},
               {"clients": [5]},  # FedBuff before `used` existed
               {"sampled": [6, 7], "failed_clients": [7]}]  # a synchronous round
    assert used_rounds(records) == {4: 1, 3: 1, 0: 1, 2: 1, 5: 1, 6: 1}


def test_update_vector_subtracts_only_what_was_sent_in_the_same_shape():
    from zofl.algorithms.outliers import update_vector

    reply = {"x": np.array([3.0, 4.0]), "d": np.array([[1.0, 2.0]]), "n": np.array([5.0])}
    sent = {"x": np.array([1.0, 1.0]), "d": np.array([10.0, 20.0])}  # "d" sent in another shape: not its base
    assert update_vector(reply, sent).tolist() == [2.0, 3.0, 1.0, 2.0, 5.0]
    assert update_vector(reply).tolist() == [3.0, 4.0, 1.0, 2.0, 5.0]
    assert update_vector({}).shape == (0,)


def test_an_update_vector_is_float64_whatever_the_reply_s_dtype():
    """A float32 reply (a torch client's) is scored in float64, as a float64 one (run D's left survivors)."""
    from zofl.algorithms.outliers import update_vector

    got = update_vector({"d": np.array([0.1, 3.0], dtype=np.float32)})
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.array([0.1, 3.0], dtype=np.float32).astype(np.float64))
    assert update_vector({"x": np.ones(2, np.float32)}, {"x": np.zeros(2)}).dtype == np.float64


def test_far_replies_honours_its_size_floor_and_flags_strictly_beyond_far():
    """far_replies passes its size_floor on (run D, continued): replies that agree to 1e-4 and one 0.05 off
    (norms about 1): with the default floor (0.5 x the median norm) s = 0.5 and nothing is far; with no
    floor s is the median positive distance (1e-4) and the odd one is 499.5 s away. A ratio exactly at ``far``
    is not beyond it."""
    from zofl.algorithms.outliers import far_replies, spread_ratios

    replies = [{"d": np.array([1.0, y])} for y in (0.0, 1e-4, -1e-4, 0.05)]
    assert far_replies(replies) == []
    assert far_replies(replies, size_floor=0.0) == [3]
    ratio = spread_ratios(replies, size_floor=0.0)[3]
    assert ratio == pytest.approx(499.5, rel=1e-9)  # (0.05 - 5e-5) / 1e-4: the centre is the median, 5e-5
    assert far_replies(replies, far=ratio, size_floor=0.0) == [] and far_replies(replies, far=ratio * 0.999,
                                                                                   size_floor=0.0) == [3]


def test_spread_ratios_judge_each_layout_of_three_or_more_on_its_own():
    """spread_ratios (run D, continued): replies are grouped by names and shapes; a group of exactly 3 is
    judged, one of 2 or of equal replies says nothing, and a group that says nothing does not stop the
    groups after it from being judged. Pinned ratios: distances to the coordinate-wise median."""
    from zofl.algorithms.outliers import spread_ratios

    three = [{"d": np.array([1.0, y])} for y in (0.0, 1e-4, 0.05)]  # median (1, 1e-4): d = 1e-4, 0, 0.0499
    # s = the median of the positive distances, (1e-4 + 0.0499) / 2 = 0.025
    assert spread_ratios(three, size_floor=0.0) == pytest.approx({0: 0.004, 1: 0.0, 2: 1.996}, rel=1e-9)
    pair = [{"d": np.zeros(3)}, {"d": np.ones(3)}]  # 2 of a layout of its own (same name, other shape)
    same = [{"e": np.ones(2)}] * 3  # 3 equal replies
    mixed = pair + same + three
    got = spread_ratios(mixed, size_floor=0.0)
    assert got == pytest.approx({5: 0.004, 6: 0.0, 7: 1.996}, rel=1e-9)
