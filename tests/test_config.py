"""Run-config validation: every bad input is refused before any work, naming the key."""
import re
import tomllib
from pathlib import Path

import pytest

from zofl.config import KEYS, ConfigError, defaults, parse_config
from zofl.setup import prepare

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_config_matches_the_key_table():
    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert app_cfg == defaults(), "regenerate it: zofl keys --write ."
    assert parse_config(app_cfg) == defaults()
    from zofl.config import with_app_config

    text = (ROOT / "pyproject.toml").read_text()
    assert with_app_config(text) == text  # the table as `zofl keys --write` writes it, in the registry's order
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
    ("num-rounds", -1, "[1, 100000]"),
    ("num-rounds", 0, "[1, 100000]"),  # issue 47: 0 rounds paid a full Ray start to do nothing
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
    ("availability", "1,1.5", "probabilities in [0.01, 1]"),
    ("availability", "x", "probabilities in [0.01, 1]"),
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
    ("run-name", "a" * 300, "at most 200 characters"),  # issue 47: refused by the character rule, limit unnamed
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


def test_a_too_long_run_name_is_refused_naming_the_length_limit():
    """Issue 47: a run-name of 300 letters was refused by the character rule alone, never naming the
    limit it broke; the refusal now states the limit, and a name at the limit is accepted."""
    assert parse_config({"run-name": "a" * 200})["run-name"] == "a" * 200
    with pytest.raises(ConfigError) as e:
        parse_config({"run-name": "a" * 201})
    assert str(e.value).startswith("run-config key 'run-name' must be letters, digits, '.', '_' and '-', not "
                                   "starting with '.', at most 200 characters (empty: <strategy>-<dataset>-<time>), "
                                   "got 'aaaa"), str(e.value)


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


def test_every_registered_method_has_its_flower_strategy_and_engine():
    from zofl.core.method import ASYNC
    from zofl.methods import ASYNC_STRATEGIES, METHODS, STRATEGIES
    from zofl.strategies import AsyncStrategy, FlowerFedAvg, LegacyStrategy, MessageStrategy, strategy_class

    assert STRATEGIES == tuple(METHODS) and len(set(STRATEGIES)) == len(STRATEGIES)
    assert set(ASYNC_STRATEGIES) == {"fedbuff", "afbo", "afbo-global", "adbo"}
    for name, e in METHODS.items():
        if e.server.kind == ASYNC:
            assert issubclass(strategy_class("async", name), AsyncStrategy)
            with pytest.raises(ConfigError, match="runs on engine = 'async'"):
                parse_config({"strategy": name})
        else:
            base = FlowerFedAvg if name == "flwr-fedavg" else MessageStrategy
            assert issubclass(strategy_class("sync", name), base)
            assert strategy_class("legacy", name) is not None
            with pytest.raises(ConfigError, match="runs on engine = 'sync' or 'legacy'"):
                parse_config({"strategy": name, "engine": "async"})
    assert strategy_class("legacy", "zohfl") is LegacyStrategy
    assert strategy_class("sync", "afbo") is AsyncStrategy and strategy_class("sync", "fednest") is MessageStrategy


def test_an_unknown_strategy_is_named_with_the_registered_ones():
    typo = r"'strategy' must be one of \('zohfl', .*got 'afob' \(did you mean 'afbo'\?\)"
    with pytest.raises(ConfigError, match=typo):
        parse_config({"strategy": "afob"})


def test_impossible_split_is_refused_before_round_one():
    """The split's keys are named for a split that cannot be made, the dataset's for a missing file."""
    with pytest.raises(ConfigError, match="^run-config keys 'num-clients'/'partitioner'/'alpha'/"
                                          "'min-partition-size'/'split-fallback': .*min-partition-size=100"):
        prepare({"num-clients": 20, "alpha": 0.05, "min-partition-size": 100, "split-fallback": "fail"})
    with pytest.raises(ConfigError, match="^run-config keys 'dataset'/'data-dir': ") as missing:
        prepare({"dataset": "mnist", "data-dir": "/nonexistent-zofl-data"})
    assert "alpha" not in str(missing.value) and "num-clients" not in str(missing.value)


def test_runs_that_cannot_work_are_refused_before_they_start():
    with pytest.raises(ConfigError, match=r"'num-rounds' must be an integer in \[1, 100000\]"):
        parse_config({"strategy": "fedrzo-bl", "num-rounds": 10**9})
    with pytest.raises(ConfigError, match=r"^run-config keys 'tau' and 'local-steps' are both 0: no client would ever "
                                          r"take a local step \(H_\{i,r\} = 0\); set tau > 0 or local-steps >= 1$"):
        parse_config({"tau": 0.0, "local-steps": 0})
    # every client a straggler runs (it is ZO-HFL's f1-only control, tests/test_controls.py) and is said
    from zofl.config import config_warnings

    assert config_warnings(parse_config({"straggler-prob": 1.0})) == [
        "run-config key 'straggler-prob' = 1: every sampled client is a straggler (H = 0) in every round, so no "
        "client ever takes a local step (for ZO-HFL this is its server steps alone, the f1-only control); use a "
        "value below 1 to train on the clients"]
    assert config_warnings(parse_config({"straggler-prob": 0.99})) == []
    # the asynchronous engine has no rounds of stragglers: straggler-prob is not read there
    assert config_warnings(parse_config({"strategy": "fedbuff", "engine": "async", "straggler-prob": 1.0})) == []
    parse_config({"strategy": "fedrzo-bl", "task": "hyper-logistic", "tau": 0.0})  # its Fig. 2 has H = 0


# -- which keys a strategy reads (zofl.methods.READ_BY; the runner compares only those) --------------

SMALL_RUN = {"num-rounds": 3, "num-clients": 5, "beta": 0.6, "tau": 3.0, "checkpoint-every": 0}
TOY_BILEVEL = {"task": "zofl.tasks.hypergrad:QuadraticHypergrad", "num-clients": 4, "local-steps": 1,
               "beta": 1.0, "num-rounds": 6, "checkpoint-every": 0}
# what a small run of a method needs beyond the defaults of its kind (a method with none is run with SMALL_RUN, or
# TOY_BILEVEL for a hypergradient method, and engine async if it is asynchronous: a new method needs no line here)
SMALL_SETTINGS = {
    # Flower's own FedAvg samples clients with an unseeded generator: every client, every round
    "flwr-fedavg": {"beta": 1.0},
    "fedbuff": {"num-rounds": 6},
    "fedrzo-nn": {"task": "relu-net", "local-steps": 3, "zo-lr": 0.001},
    "fedrzo-bl": {"num-rounds": 2, "task": "hyper-logistic", "local-steps": 2, "lower-rounds": 1, "zo-lr": 0.01,
                  "eta": 0.01},
    "fednest": {"num-rounds": 2},
    "sdbo": {"num-rounds": 3},
}


def small_run(name: str) -> dict:
    """One small run-config of registered method ``name`` (SMALL_SETTINGS on top of its kind's defaults)."""
    from zofl.core.method import ASYNC, HYPERGRAD
    from zofl.methods import METHODS

    method = METHODS[name].server
    base = TOY_BILEVEL if method.needs == HYPERGRAD else SMALL_RUN
    engine = {"engine": "async", "buffer-size": 3} if method.kind == ASYNC else {}
    if name == "fedbuff":
        engine = {"engine": "async"}
    return {**base, **engine, "strategy": name, **SMALL_SETTINGS.get(name, {})}


def _runs() -> dict:
    from zofl.methods import STRATEGIES

    return {**{name: small_run(name) for name in STRATEGIES},
            "fedrzo-bl-fair": {**{k: v for k, v in small_run("fedrzo-bl").items() if k != "eta"}, "task": "fair-relu",
                               "zo-lr": 0.001}}


RUNS = _runs()  # one small run of every registered strategy (and of FedRZO_bl's second task)


def other_value(k):
    """A valid value of key ``k`` other than its default: its declared ``example``, or the first that passes its
    check among the options its ``allowed`` names (strings), its negation (booleans), or a few numbers near its
    default; None when there is none (a new key then declares an ``example``)."""
    if k.example is not None:
        return k.example
    if k.type is bool:
        return not k.default
    cands = re.findall(r"'([^']*)'", k.allowed) if k.type is str else \
        [k.default + 1, k.default * 2, 2, 3, 1] if k.type is int else \
        [k.default / 2, k.default * 2, k.default + 0.5, 0.5, 0.25, 2.0, 0.1]
    for v in cands:
        if v != k.default and isinstance(v, k.type) and not isinstance(v, bool) and k.check(v):
            try:
                if parse_config({k.name: v})[k.name] == v:
                    return v
            except ConfigError:
                continue
    return None


def other_values() -> dict:
    """A valid value other than the default for every method key (READ_BY), from the registry: no list to edit."""
    from zofl.config import KEY_BY_NAME
    from zofl.methods import READ_BY

    return {name: other_value(KEY_BY_NAME[name]) for name in READ_BY}


def test_other_values_cover_the_method_keys():
    from zofl.config import KEY_BY_NAME
    from zofl.methods import READ_BY
    values = other_values()
    assert set(values) == set(READ_BY) and None not in values.values(), [k for k, v in values.items() if v is None]
    for k, v in values.items():
        assert v != KEY_BY_NAME[k].default and parse_config({k: v})[k] == v


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_strategy_gives_the_same_numbers_whatever_the_keys_it_does_not_read(tmp_path, name):
    import numpy as np

    from zofl.inprocess import run_inprocess
    from zofl.methods import reads
    from zofl.results import read_rounds

    cfg = RUNS[name]
    unread = {k: v for k, v in other_values().items() if not reads(cfg["strategy"], k) and k not in cfg}
    assert unread  # every strategy leaves some method keys alone
    d0, x0 = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": "a"}, workers=0)
    d1, x1 = run_inprocess({**cfg, **unread, "output-dir": str(tmp_path), "run-name": "b"}, workers=0)
    np.testing.assert_array_equal(x0, x1)
    skip = {"wall_s", "client_compute_s", "client_compute_max_s", "client_wall_max_s", "uplink_bytes", "downlink_bytes"}
    strip = lambda rec: [{k: v for k, v in r.items() if k not in skip} for r in rec]  # noqa: E731
    assert strip(read_rounds(d0)) == strip(read_rounds(d1))
    # each client reports the seconds its work took: in every record with replies, summed, a few seconds at most
    took = [r["client_compute_s"] for r in read_rounds(d0)[1:] if r.get("participants")]
    assert all(0 < t < 60 for t in took), took


def test_raw_cifar10_is_warned_about():
    from zofl.config import config_warnings

    assert "'standardize' = false with dataset = 'cifar10'" in " ".join(config_warnings(parse_config(
        {"dataset": "cifar10"})))
    assert config_warnings(parse_config({"dataset": "cifar10", "standardize": True})) == []
    assert config_warnings(parse_config({"dataset": "mnist"})) == []


# -- issue 30: hostile values that once got through the check -------------------------------------

@pytest.mark.parametrize("value", ["0", "1e-6", "1,0", "0.5,0.009", "nan", "1,", "-0.5"])
def test_availability_that_would_keep_the_async_engine_drawing_is_refused(value):
    """availability = "0" (or 1e-6) was accepted and spun the asynchronous engine at full CPU without a
    record: a client sits out about 1/p tasks per task it takes. Every entry (entry pid mod k) must be in
    [0.01, 1]; the engine's own draw refuses the rest too, for callers that skip the check."""
    from zofl.core.sampling import available

    with pytest.raises(ConfigError, match=r"'availability' must be a comma list of probabilities in \[0.01, 1\]"):
        parse_config({"strategy": "fedbuff", "engine": "async", "availability": value})
    assert parse_config({"strategy": "afbo", "engine": "async", "availability": "1,0.01"})["availability"] == "1,0.01"
    with pytest.raises(ValueError, match="below 0.01"):
        available(0, 1, 2, 0.0)
    assert available(0, 1, 2, 1.0) and isinstance(available(0, 1, 2, 0.5), bool)


def test_integers_must_fit_flowers_run_config():
    """seed = 2**63 was accepted here and failed inside Flower after ~30 s (its run-config carries ints as
    sint64); numpy's SeedSequence takes any integer >= 0, so the bound is Flower's."""
    assert parse_config({"seed": 2**63 - 1})["seed"] == 2**63 - 1
    for key, value in (("seed", 2**63), ("seed", 2**64 + 5), ("checkpoint-every", 2**63), ("krum-f", -2**63 - 1),
                       ("alpha", 10**400), ("seed", 1e300)):
        with pytest.raises(ConfigError, match=f"'{key}' must be") as e:
            parse_config({key: value})
        assert len(str(e.value)) < 300 and "\n" not in str(e.value)  # a 400-digit number is cut, one line


@pytest.mark.parametrize("key,value", [("data-dir", "/tmp/a\x00b"), ("output-dir", "/tmp/a\nb"),
                                       ("task", 'softmax"x'), ("availability", "1\t"), ("task", "a" * 5000)])
def test_strings_flower_cannot_carry_are_refused(key, value):
    """Flower hands the run-config to its processes as one TOML line split at '"': a string with '"' or
    a control character cannot get through (and no path holds a NUL)."""
    with pytest.raises(ConfigError, match=f"'{key}' must be"):
        parse_config({key: value})


@pytest.mark.parametrize("strategy", ["afbo", "afbo-global", "adbo"])
def test_a_buffer_one_update_per_client_could_never_fill_is_refused_before_any_work(strategy):
    """AFBO's, AFBO-global's and ADBO's clients send one update per server step: buffer-size above num-clients
    is refused with the run-config (Method.check_config, for the flag one_task_per_version); num-clients itself
    is fine."""
    keys = {"strategy": strategy, "engine": "async", "task": "hyper-cleaning", "num-clients": 2}
    refused = r"^run-config key 'buffer-size' = 3 is more than num-clients = 2: each client sends one update per " \
              r"server step, so the buffer could never fill$"
    with pytest.raises(ConfigError, match=refused):
        parse_config({**keys, "buffer-size": 3})
    parse_config({**keys, "buffer-size": 2})


@pytest.mark.parametrize("text, rest", [
    ("[a]\nx = 1\n\n[tool.flwr.app.config]\nold = 1\n", "[a]\nx = 1\n\n{table}"),  # the last table of the file
    ("[tool.flwr.app.config]\nold = 1\n[next]\ny = 2\n", "{table}[next]\ny = 2\n"),  # a table right after it
    ("[tool.flwr.app.config]\n[next]\ny = 2\n", "{table}[next]\ny = 2\n"),  # an empty table
    ("[tool.flwr.app.config]\nold = 1\n\n[next]\n", "{table}\n[next]\n"),  # up to the blank line
])
def test_the_app_config_table_is_replaced_up_to_its_end_and_no_further(text, rest):
    from zofl.config import app_config_table, with_app_config

    assert with_app_config(text) == rest.format(table=app_config_table())


def test_the_key_table_keeps_each_key_on_one_row(monkeypatch):
    """A key whose default, allowed values or meaning holds '|' or a line break stays one row of seven cells."""
    from types import SimpleNamespace

    import zofl.methods as methods

    key = SimpleNamespace(name="toy-key", group="Toy", default="a|b", allowed="x\ny", source="ours",
                          doc="one\ntwo | three")
    monkeypatch.setattr(methods, "keys", lambda: [key])
    row = methods.key_table().splitlines()[-1]
    assert row == r"| `toy-key` | Toy | a\|b | x y | ours | every method | one two \| three |"


def test_the_config_module_computes_its_key_tables_on_first_read_and_has_no_other_attribute():
    import zofl.config

    assert zofl.config.KEY_BY_NAME["num-rounds"] in zofl.config.KEYS
    with pytest.raises(AttributeError, match=r"^module 'zofl\.config' has no attribute 'NOPE'$"):
        zofl.config.NOPE  # noqa: B018


def test_a_value_in_an_error_is_shown_whole_up_to_80_characters_then_cut_with_its_length():
    from zofl.config import _show

    assert _show("a" * 78) == repr("a" * 78)  # 80 characters with the quotes
    assert _show("a" * 79) == repr("a" * 79)[:80] + "... (81 characters)"
