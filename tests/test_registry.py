"""The method registry (zofl.methods): a method is declared once, in its Method class, and everything else
(the run-config's strategy values, engine routing, READ_BY, the Flower strategy class, zofl run --help) is
derived. A toy method added with one call runs end to end through the in-process engine."""
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from zofl.config import ConfigError, parse_config
from zofl.core.method import Method, State
from zofl.core.protocol import Reply, Work
from zofl.methods.fedavg import ServerLR
from zofl.settings import Settings, key, positive


@dataclass(frozen=True)
class HalfStepParams(ServerLR):
    """The toy's keys: the baselines' server-lr (shared) and one of its own."""

    toy_fraction: float = key(0.5, "a number > 0", "the toy's step towards 1", "ours", positive)


class HalfStep(Method):
    """A toy: each client returns its x moved toy-fraction of the way to 1; the server takes the mean (no paper)."""

    name, title = "toy-half-step", "half step to 1 (a toy)"
    Params = HalfStepParams

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": state["x"].shape}

    def update(self, state: State, r: int, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        if not replies:
            return state, {}
        x = np.mean([rep.arrays["x"] for rep in replies], axis=0)
        return {**state, "x": x}, {}


def client_work(cfg, task, spec, work: Work, state) -> Reply:
    x = work.arrays["x"]
    return Reply(work.pid, {"x": x + HalfStepParams.of(cfg).toy_fraction * (1.0 - x)}, 1, {"steps": work.H})


@pytest.fixture
def toy():
    from zofl.methods import register, unregister

    entry = register(HalfStep)
    yield entry
    unregister(HalfStep.name)


def test_a_toy_method_is_added_with_one_call_and_runs(toy, tmp_path):
    from zofl.cli import methods_help
    from zofl.inprocess import run_inprocess
    from zofl.methods import READ_BY, reads
    from zofl.strategies import MessageStrategy, strategy_class

    assert toy.client_work is client_work  # the module's client half
    import zofl.methods as methods
    assert "toy-half-step" in methods.STRATEGIES
    assert "toy-half-step" in READ_BY["server-lr"] and reads("toy-half-step", "server-lr")
    assert READ_BY["toy-fraction"] == {"toy-half-step"} and not reads("toy-half-step", "prox-mu")
    assert parse_config({"strategy": "toy-half-step", "toy-fraction": 0.25})["toy-fraction"] == 0.25  # its own key
    with pytest.raises(ConfigError, match="'toy-fraction' must be a number > 0"):
        parse_config({"strategy": "toy-half-step", "toy-fraction": -1.0})
    assert issubclass(strategy_class("sync", "toy-half-step"), MessageStrategy)
    assert "toy-half-step" in methods_help()
    cfg = {"strategy": "toy-half-step", "num-rounds": 3, "num-clients": 3, "beta": 1.0, "checkpoint-every": 0,
           "output-dir": str(tmp_path), "run-name": "toy"}
    _, x = run_inprocess(cfg, workers=0)
    from zofl.setup import prepare
    x0 = HalfStep(*prepare({k: v for k, v in cfg.items() if k not in ("output-dir", "run-name")})).init()["x"]
    np.testing.assert_allclose(x, 1 - (1 - x0) * 0.5 ** 3)


def test_a_method_is_registered_once_and_its_keys_are_declared_once(toy):
    from zofl.config import keys
    from zofl.methods import METHODS, register

    with pytest.raises(ValueError, match="registered already"):
        register(HalfStep)

    @dataclass(frozen=True)
    class Twice(ServerLR):  # a subclass that declares server-lr again: refused when a method uses it
        server_lr: float = key(2.0, "a number > 0", "a second server-lr", "ours", positive)

    with pytest.raises(ValueError, match="'server-lr' is declared twice: in ServerLR and in .*Twice"):
        class Bad(HalfStep):
            name, Params = "toy-bad", Twice

    @dataclass(frozen=True)
    class Own(Settings):  # a group of its own that declares server-lr again: refused by register
        server_lr: float = key(2.0, "a number > 0", "a second server-lr", "ours", positive)

    class Clash(HalfStep):
        name, Params = "toy-bad", Own

    with pytest.raises(ValueError, match="'server-lr' is declared twice: in ServerLR and in .*Own"):
        register(Clash, client_work)

    class Untyped(HalfStep):
        name, Params = "toy-untyped", None

    with pytest.raises(ValueError, match="Params must be a zofl.settings.Settings dataclass"):
        register(Untyped, client_work)

    @dataclass(frozen=True)
    class Plain:  # a dataclass, but not a Settings: its fields are no run-config keys
        lr: float = 0.1

    class PlainParams(HalfStep):
        name, Params = "toy-plain", Plain

    with pytest.raises(ValueError, match="Params must be a zofl.settings.Settings dataclass"):
        register(PlainParams, client_work)
    assert "toy-bad" not in METHODS and "toy-untyped" not in METHODS and "toy-plain" not in METHODS
    assert [k.name for k in keys()].count("server-lr") == 1


def test_after_unregister_the_toy_key_is_unknown():
    with pytest.raises(ConfigError, match="unknown run-config key"):
        parse_config({"toy-fraction": 0.5})


def test_an_unregistered_name_is_refused_with_a_hint():
    with pytest.raises(ConfigError, match=r"got 'toy-half-step'"):
        parse_config({"strategy": "toy-half-step"})


def test_zofl_run_takes_the_engine_and_task_a_method_needs():
    from zofl.cli import with_method_defaults

    assert with_method_defaults({"strategy": "afbo"}) == {"strategy": "afbo", "engine": "async",
                                                         "task": "hyper-cleaning"}
    assert with_method_defaults({"strategy": "fedrzo-bl"})["task"] == "hyper-logistic"
    assert with_method_defaults({"strategy": "fedbuff"}) == {"strategy": "fedbuff", "engine": "async"}
    assert with_method_defaults({"strategy": "zohfl"}) == {"strategy": "zohfl"}
    kept = {"strategy": "afbo", "engine": "sync", "task": "regularization"}  # what the user says stands
    assert with_method_defaults(kept) == kept
    for name in ("afbo", "fednest", "adbo", "fedrzo-bl", "fedbuff"):
        parse_config(with_method_defaults({"strategy": name}))  # valid as they stand


def test_the_key_page_is_the_generated_table():
    """docs/keys.md is `zofl keys`' output: every key with its default and the methods that read it."""
    from pathlib import Path

    from zofl.config import KEYS
    from zofl.methods import key_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "keys.md").read_text()
    assert page == key_table(), "docs/keys.md is stale: python -m zofl.cli keys > docs/keys.md"
    for k in KEYS:
        assert f"| `{k.name}` |" in page
    assert "| `prox-mu` | FedProxParams | 0.01 |" in page and "| fedprox |" in page
