"""The methods, one module each: the server half (a ``zofl.core.method.Method`` subclass, no
Flower) and the client half (the module's ``client_work(cfg, task, spec, work, state) -> Reply``, no
Flower). Each Method class declares, once, its name, kind (sync / async / control), the task it needs
and its typed parameters, ``Params``: the run-config keys it reads (``zofl.core.method.Method``);
``REGISTERED`` below lists them, and every other list (the values of the run-config key ``strategy``,
the engine routing, ``READ_BY``, the run-config keys themselves (``zofl.config.keys``), the Flower
strategy classes of ``zofl.strategies``, ``zofl run --help``) is derived here. Adding a method is
its module and one line in ``REGISTERED``; docs/architecture.md, "Add a method"."""
from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass
from typing import Callable

from ..core.method import ASYNC
from ..settings import Config, ConfigError, Key, Settings, collect_keys
from .adbo import ADBO, SDBO
from .afbo import AFBO
from .afbo_global import AFBOGlobal
from .controls import Centralised, F1Only, ServerSGD, X0Only
from .fedavg import FedAvg, FlowerFedAvgRun
from .fedavgm import FedAvgM
from .fedbuff import FedBuff
from .fedmspp import FedMSPP
from .fednest import FedNest
from .fedprox import FedProx
from .fedrzo_bl import FedRZObl
from .fedrzo_nn import FedRZOnn
from .scaffnew import Scaffnew
from .scaffold import Scaffold
from .zohfl import ZOHFL

REGISTERED = (ZOHFL, FedAvg, FedAvgM, FedProx, Scaffold, Scaffnew, FedMSPP, FlowerFedAvgRun, FedRZOnn, FedRZObl,
              FedBuff, AFBO, AFBOGlobal, FedNest, ADBO, SDBO, X0Only, F1Only, ServerSGD, Centralised)


@dataclass(frozen=True)
class MethodEntry:
    server: type  # Method subclass: (cfg, task, spec) -> Method
    client_work: Callable  # (cfg, task, spec, work, state) -> Reply: its module's client_work


METHODS: dict[str, MethodEntry] = {}
STRATEGIES: tuple[str, ...] = ()
ASYNC_STRATEGIES: tuple[str, ...] = ()
# Keys of one method's algorithm (its ``params``), and the methods that read them; every other key is read
# by every method (or describes the run, the data or the task). The runner (zofl.compare) compares only
# the keys a method reads when it decides whether a finished run is today's cell, so a new default of,
# say, local-lr does not make finished ZO-HFL runs count as unfinished. tests/test_config.py runs every
# method with all the keys it does not read changed: same numbers.
READ_BY: dict[str, frozenset[str]] = {}


def _derive() -> None:
    """Every list above, from METHODS (the dicts are updated in place: importers keep seeing them)."""
    global STRATEGIES, ASYNC_STRATEGIES
    STRATEGIES = tuple(METHODS)
    ASYNC_STRATEGIES = tuple(n for n, e in METHODS.items() if e.server.kind == ASYNC)
    READ_BY.clear()
    READ_BY.update({key: frozenset(n for n, e in METHODS.items() if key in e.server.params)
                    for key in dict.fromkeys(k for e in METHODS.values() for k in e.server.params)})


def keys() -> tuple[Key, ...]:
    """Every run-config key: the engine groups' (``zofl.settings.ENGINE_GROUPS``), then each registered
    method's ``Params``, each key once (``zofl.config`` reads them from here)."""
    return collect_keys(tuple(dict.fromkeys(e.server.Params for e in METHODS.values())))


def register(method: type, client_work: Callable | None = None) -> MethodEntry:
    """Add ``method`` (a Method subclass; its client half is its module's ``client_work`` unless given) to the
    registry, under ``method.name``. The package's own methods are ``REGISTERED``; a method registered at
    run time exists in this process only (Flower's ClientApps import zofl anew: put it in REGISTERED)."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered already ({METHODS[method.name].server.__name__})")
    if not (isinstance(method.Params, type) and issubclass(method.Params, Settings)
            and dataclasses.is_dataclass(method.Params)):
        raise ValueError(f"method {method.name!r}: its Params must be a zofl.settings.Settings dataclass, got "
                         f"{method.Params!r}")
    METHODS[method.name] = MethodEntry(method, client_work or sys.modules[method.__module__].client_work)
    try:
        keys()  # every key declared once (a key its Params shares with another group's: ValueError)
    except ValueError:
        del METHODS[method.name]
        raise
    _derive()
    return METHODS[method.name]


def unregister(name: str) -> None:
    """Remove a method added with ``register`` (tests)."""
    del METHODS[name]
    _derive()


for _cls in REGISTERED:
    register(_cls)


def reads(strategy: str, key: str) -> bool:
    """Whether runs of ``strategy`` read ``key`` (see READ_BY)."""
    return key not in READ_BY or strategy in READ_BY[key]


def check_method_config(cfg: Config) -> None:
    """The rules of the run-config that depend on its method (``zofl.config.parse_config`` calls it):
    a known ``strategy``, on an engine it runs on."""
    if cfg.strategy not in METHODS:
        close = difflib.get_close_matches(cfg.strategy, STRATEGIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"run-config key 'strategy' must be one of {STRATEGIES}, got {cfg.strategy!r}{hint}")
    method = METHODS[cfg.strategy].server
    if (cfg.engine == "async") != (method.kind == ASYNC):
        need = f"engine = 'async' (asynchronous: {ASYNC_STRATEGIES})" if method.kind == ASYNC \
            else "engine = 'sync' or 'legacy'"
        raise ConfigError(f"run-config key 'engine': strategy={cfg.strategy!r} runs on {need}, "
                          f"got engine={cfg.engine!r}")
    if method.flower_fedavg and cfg.resume:
        raise ConfigError(f"run-config key 'resume': strategy {cfg.strategy} (the cross-check) cannot resume; "
                          f"use fedavg")
    method.check_config(cfg)


def key_table() -> str:
    """Every run-config key as a markdown table (docs/keys.md is its output, ``zofl keys`` prints it):
    default, allowed values, where the default comes from, which methods read it, what it means."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = ["# Run-config keys", "",
            "Generated by `zofl keys` from the typed settings groups that declare every key once (`zofl/settings.py`: "
            "the groups every run has and those several methods share; a method's own `Params` in its module under "
            "`zofl/methods/`), with each key's type, allowed values, default and source (`paper` = the ZO-HFL "
            "paper's experiments, `ours` = a choice the papers leave open, `run` = describes the run), and from the "
            "method registry (`zofl/methods/__init__.py`: which methods read a key; the others ignore it). "
            "tests/test_registry.py keeps this page equal to the command's output.", "",
            "| key | group | default | allowed | source | read by | meaning |", "|---|---|---|---|---|---|---|"]
    for k in keys():
        by = ", ".join(n for n in STRATEGIES if n in READ_BY[k.name]) if k.name in READ_BY else "every method"
        default = '""' if k.default == "" else k.default
        rows.append(f"| `{k.name}` | {k.group} | {cell(default)} | {cell(k.allowed)} | {k.source} | {by} | "
                    f"{cell(k.doc)} |")
    return "\n".join(rows) + "\n"
