"""Flower's side: the strategies that drive the Flower-free methods (``zofl.methods``).

* ``MessageStrategy`` (engine sync): a ``flwr.serverapp.strategy.Strategy``.
* ``LegacyStrategy`` (engine legacy): a ``flwr.server.strategy.Strategy`` (the legacy API).
* ``AsyncStrategy`` (engine async): push / pull on the Grid.
* ``FlowerFedAvg`` / ``LegacyFlowerFedAvg``: Flower's own FedAvg, the cross-check (``flwr-fedavg``).

Every registered method also has a class of its own, named after its Method class (``ZOHFLStrategy``,
``FedBuffStrategy``, ``AFBOStrategy``, ...), made here from the registry so that a user can name
the method's Flower strategy; ``strategy_class(engine, strategy)`` picks the class of a run.
"""
from __future__ import annotations

from ..core.method import ASYNC
from ..methods import METHODS
from .asynchronous import AsyncStrategy, GridTransport
from .flwr_fedavg import FlowerFedAvg, LegacyFlowerFedAvg
from .legacy import LegacyStrategy
from .message import MessageStrategy

_PER_METHOD: dict[type, type] = {}


def method_strategy(method: type) -> type:
    """The Flower strategy class of one method (made once, named after its Method class)."""
    if method not in _PER_METHOD:
        base = AsyncStrategy if method.kind == ASYNC else MessageStrategy
        api = "push / pull" if method.kind == ASYNC else "rounds"
        _PER_METHOD[method] = type(f"{method.__name__}Strategy", (base,),
                                   {"__doc__": f"{method.title} on the Message API ({api}).", "__module__": __name__})
    return _PER_METHOD[method]


def strategy_class(engine: str, strategy: str) -> type:
    """The Flower strategy class of a run: Flower's own FedAvg for the cross-check, else the method's own
    (a ``MessageStrategy`` or ``AsyncStrategy`` subclass); the legacy engine's ``LegacyStrategy``."""
    method = METHODS[strategy].server
    if engine == "legacy":
        return LegacyFlowerFedAvg if method.flower_fedavg else LegacyStrategy
    return FlowerFedAvg if method.flower_fedavg else method_strategy(method)


PER_METHOD = {e.server.__name__ + "Strategy": method_strategy(e.server) for e in METHODS.values()
              if not e.server.flower_fedavg}
globals().update(PER_METHOD)  # ZOHFLStrategy, FedBuffStrategy, AFBOStrategy, ...


__all__ = ["AsyncStrategy", "FlowerFedAvg", "GridTransport", "LegacyFlowerFedAvg", "LegacyStrategy",
           "MessageStrategy", "method_strategy", "strategy_class", *PER_METHOD]
