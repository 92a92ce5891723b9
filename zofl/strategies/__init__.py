"""Flower's side: the strategies that drive the Flower-free methods (``zofl.methods``).

For a user's own Flower App (``zofl.strategies.app``; docs/user-app.md), one class per method, each in its module:
``ZOHFLStrategy``, ``FedAvgStrategy``, ``FedAvgMStrategy``, ``FedProxStrategy``, ``ScaffoldStrategy``,
``ScaffnewStrategy``, ``FedMSPPStrategy``, ``FedRZOnnStrategy`` (Flower's ``Strategy.start``) and
``FedBuffStrategy`` (push / pull), made with the method's typed Params; their client half is ``zofl.client.train``.

The harness's engines (``zofl run``, ``zofl.server_app``), over a ``SyncRun`` / ``AsyncRun`` it built:

* ``MessageStrategy`` (engine sync): a ``flwr.serverapp.strategy.Strategy``.
* ``LegacyStrategy`` (engine legacy): a ``flwr.server.strategy.Strategy`` (the legacy API).
* ``AsyncStrategy`` (engine async): push / pull on the Grid.
* ``FlowerFedAvg`` / ``LegacyFlowerFedAvg``: Flower's own FedAvg, the cross-check (``flwr-fedavg``).

``strategy_class(engine, strategy)`` picks the harness's class of a run.
"""
from __future__ import annotations

from ..core.method import ASYNC
from ..methods import METHODS
from .adbo import ADBOStrategy, SDBOStrategy
from .afbo import AFBOStrategy
from .afbo_global import AFBOGlobalStrategy
from .app import AppStrategy, AsyncAppStrategy
from .asynchronous import AsyncStrategy, GridTransport
from .fedavg import FedAvgStrategy
from .fedavgm import FedAvgMStrategy
from .fedbuff import FedBuffStrategy
from .fedmspp import FedMSPPStrategy
from .fednest import FedNestStrategy
from .fedprox import FedProxStrategy
from .fedrzo_bl import FedRZOblStrategy
from .fedrzo_nn import FedRZOnnStrategy
from .flwr_fedavg import FlowerFedAvg, LegacyFlowerFedAvg
from .legacy import LegacyStrategy
from .message import MessageStrategy
from .scaffnew import ScaffnewStrategy
from .scaffold import ScaffoldStrategy
from .zohfl import ZOHFLStrategy

# a user App's strategy of each method that has one (tests and docs/user-app.md follow these tuples): of a supervised
# model (its client half zofl.client.train), and of a bilevel problem given as a task (zofl.client.train_task)
APP_STRATEGIES = (ZOHFLStrategy, FedAvgStrategy, FedAvgMStrategy, FedProxStrategy, ScaffoldStrategy, ScaffnewStrategy,
                  FedMSPPStrategy, FedRZOnnStrategy, FedBuffStrategy)
TASK_STRATEGIES = (FedRZOblStrategy, AFBOStrategy, AFBOGlobalStrategy, FedNestStrategy, ADBOStrategy, SDBOStrategy)


def strategy_class(engine: str, strategy: str) -> type:
    """The harness's Flower strategy class of a run: Flower's own FedAvg for the cross-check, else a
    ``MessageStrategy`` or ``AsyncStrategy``; the legacy engine's ``LegacyStrategy``."""
    method = METHODS[strategy].server
    if engine == "legacy":
        return LegacyFlowerFedAvg if method.flower_fedavg else LegacyStrategy
    if method.flower_fedavg:
        return FlowerFedAvg
    return AsyncStrategy if method.kind == ASYNC else MessageStrategy


__all__ = ["ADBOStrategy", "AFBOGlobalStrategy", "AFBOStrategy", "APP_STRATEGIES", "AppStrategy", "AsyncAppStrategy",
           "AsyncStrategy", "FedAvgMStrategy", "FedAvgStrategy", "FedBuffStrategy", "FedMSPPStrategy",
           "FedNestStrategy", "FedProxStrategy", "FedRZOblStrategy", "FedRZOnnStrategy", "FlowerFedAvg",
           "GridTransport", "LegacyFlowerFedAvg", "LegacyStrategy", "MessageStrategy", "SDBOStrategy",
           "ScaffnewStrategy", "ScaffoldStrategy", "TASK_STRATEGIES", "ZOHFLStrategy", "strategy_class"]
