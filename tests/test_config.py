"""Run-config validation: every bad input is refused before any work, naming the key."""
from pathlib import Path

import pytest
import tomllib

from zofl.config import KEYS, ConfigError, defaults, parse_config
from zofl.setup import prepare

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_config_matches_the_key_table():
    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert app_cfg == defaults()
    assert parse_config(app_cfg) == defaults()
    assert all(k.doc and k.allowed for k in KEYS)


@pytest.mark.parametrize("key,value,allowed", [
    ("strategy", "fedfoo", "one of"),
    ("dataset", "imagenet", "one of"),
    ("alpha", 0.0, "> 0"),
    ("alpha", -1.0, "> 0"),
    ("beta", 0.0, "(0, 1]"),
    ("beta", 1.5, "(0, 1]"),
    ("eta", 0.0, "> 0"),
    ("eta", -0.1, "> 0"),
    ("tau", -1.0, ">= 0"),
    ("num-rounds", -1, "[0, 100000]"),
    ("num-clients", 0, ">= 1"),
    ("gamma", float("nan"), "> 0"),
    ("batch-size", 0, ">= 1"),
    ("uplink", "floats", "'scalars' or 'vectors'"),
    ("x0", "random", "'zeros' or 'pretrained'"),
    ("straggler-prob", 1.5, "[0, 1]"),
    ("data-dir", "relative/path", "absolute path"),
    ("crn", "yes", "true or false"),
    ("num-clients", 2.5, ">= 1"),
    ("weighting", "sum", "'uniform', 'participants' or 'rho'"),
    ("speed-profile", "gamma", "'none', 'uniform', 'lognormal' or 'slow'"),
    ("engine", "threads", "one of"),
    ("clock", "sundial", "'simulated' or 'wall'"),
    ("availability", "1,1.5", "probabilities in [0, 1]"),
    ("availability", "x", "probabilities in [0, 1]"),
    ("local-work", "0", "numbers > 0"),
    ("buffer-size", 0, ">= 1"),
    ("slow-clients", "a,b", "client ids"),
    ("speed-param", 0.0, "> 0"),
    ("round-deadline-s", -1.0, ">= 0"),
    ("crash-prob", 1.2, "[0, 1]"),
    ("corrupt-prob", -0.1, "[0, 1]"),
    ("hang-s", 0.0, "> round-deadline-s"),
    ("reply-max-abs", float("inf"), "> 0"),
    ("checkpoint-every", -1, ">= 0"),
    ("lower-rounds", 0, ">= 1"),
    ("lower-lr", 0.0, "> 0"),
    ("upper-set", "ball", "'task', 'local-sets' or 'none'"),
    ("local-sets", "box,cube", "comma list of box, ball, none"),
    ("step-time-s", -0.5, ">= 0"),
    ("run-name", "a/b", "letters, digits"),
])
def test_bad_values_name_the_key_and_the_rule(key, value, allowed):
    with pytest.raises(ConfigError) as e:
        parse_config({key: value})
    assert repr(key) in str(e.value) and allowed in str(e.value)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.name)
def test_every_key_refuses_a_value_of_the_wrong_type(key):
    wrong = {str: 1, bool: "yes", int: "ten", float: "0.1"}[key.type]
    with pytest.raises(ConfigError, match=f"'{key.name}' must be"):
        parse_config({key.name: wrong})


@pytest.mark.parametrize("config,match", [
    ({"hang-prob": 0.1}, "needs 0 < round-deadline-s < hang-s"),
    ({"hang-prob": 0.1, "round-deadline-s": 5.0, "hang-s": 2.0}, "needs 0 < round-deadline-s < hang-s"),
    ({"crash-prob": 0.6, "hang-prob": 0.3, "corrupt-prob": 0.2, "round-deadline-s": 1.0},
     "'crash-prob' \\+ 'hang-prob' \\+ 'corrupt-prob' must be at most 1"),
    ({"speed-profile": "uniform", "speed-param": 2.0}, "'speed-param' must be in \\(0, 1\\]"),
    ({"resume": True}, "'resume' = true needs 'run-name'"),
    ({"speed-profile": "slow", "slow-clients": "3,12"}, "'slow-clients' names clients \\[12\\]"),
    ({"strategy": "fedbuff"}, "'engine': strategy='fedbuff' runs on engine = 'async'"),
    ({"engine": "async"}, "'engine': strategy='zohfl' runs on engine = 'sync' or 'legacy'"),
    ({"strategy": "flwr-fedavg", "resume": True, "run-name": "a"}, "flwr-fedavg .* cannot resume"),
])
def test_rules_between_keys(config, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(config)


def test_unknown_key():
    with pytest.raises(ConfigError, match="unknown run-config key"):
        parse_config({"num_rounds": 3})


def test_ints_are_accepted_for_floats():
    assert parse_config({"alpha": 1000, "beta": 1})["alpha"] == 1000.0


def test_unknown_task_and_missing_file_fail_in_prepare(tmp_path):
    with pytest.raises(ConfigError, match="'task'.*must be one of"):
        prepare({"task": "transformer"})
    with pytest.raises(ConfigError) as e:
        prepare({"dataset": "cifar10", "data-dir": str(tmp_path)})
    assert str(tmp_path / "cifar10.npz") in str(e.value) and "'dataset'" in str(e.value)


def test_config_knows_every_registered_strategy():
    from zofl.config import ASYNC_STRATEGIES as async_names
    from zofl.config import STRATEGIES as names
    from zofl.methods import METHODS
    from zofl.strategies import ASYNC_STRATEGIES, MESSAGE_STRATEGIES

    assert set(names) == set(METHODS) == set(MESSAGE_STRATEGIES) | set(ASYNC_STRATEGIES)
    assert set(async_names) == set(ASYNC_STRATEGIES) == {n for n, e in METHODS.items() if e.server.asynchronous}


def test_impossible_split_is_refused_before_round_one():
    with pytest.raises(ConfigError, match="min-partition-size=100"):
        prepare({"num-clients": 20, "alpha": 0.05, "min-partition-size": 100})


def test_runs_that_cannot_work_are_refused_before_they_start():
    with pytest.raises(ConfigError, match=r"'num-rounds' must be an integer in \[0, 100000\]"):
        parse_config({"strategy": "fedrzo-bl", "num-rounds": 10**9})
    with pytest.raises(ConfigError, match="'tau' and 'local-steps' are both 0"):
        parse_config({"tau": 0.0, "local-steps": 0})
    # every client a straggler runs (it is ZO-HFL's f1-only control, tests/test_controls.py) and is said
    from zofl.config import config_warnings

    assert "every sampled client is a straggler" in config_warnings(parse_config({"straggler-prob": 1.0}))[0]
    assert config_warnings(parse_config({"straggler-prob": 0.99})) == []
    parse_config({"strategy": "fedrzo-bl", "task": "hyper-logistic", "tau": 0.0})  # its Fig. 2 has H = 0
