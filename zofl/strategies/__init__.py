"""Flower's side: the strategies that drive the Flower-free methods (``zofl.methods``).

* ``MessageStrategy`` (engine sync): a ``flwr.serverapp.strategy.Strategy``; one subclass per
  method below, so a user can name the method's Flower strategy (``ZOHFLStrategy`` ...).
* ``LegacyStrategy`` (engine legacy): a ``flwr.server.strategy.Strategy`` (the legacy API).
* ``AsyncStrategy`` (engine async): push / pull on the Grid, ``FedBuffStrategy``.
* ``FlowerFedAvg`` / ``LegacyFlowerFedAvg``: Flower's own FedAvg, the cross-check.
``strategy_for(cfg)`` picks the class for a run-config.
"""
from __future__ import annotations

from .asynchronous import AsyncStrategy, GridTransport
from .flwr_fedavg import FlowerFedAvg, LegacyFlowerFedAvg
from .legacy import LegacyStrategy
from .message import MessageStrategy


class ZOHFLStrategy(MessageStrategy):
    """ZO-HFL (Algorithm 1 of the ZO-HFL paper) on the Message API."""


class FedAvgStrategy(MessageStrategy):
    """FedAvg in the ZO-HFL harness on the Message API."""


class FedProxStrategy(MessageStrategy):
    """FedProx on the Message API."""


class ScaffoldStrategy(MessageStrategy):
    """SCAFFOLD on the Message API."""


class FedRZOnnStrategy(MessageStrategy):
    """FedRZO_nn (paper 001, Algorithm 1) on the Message API."""


class FedRZOblStrategy(MessageStrategy):
    """FedRZO_bl (paper 001, Algorithm 2, lower-level rounds as real rounds) on the Message API."""


class FedNestStrategy(MessageStrategy):
    """FedNest_SGD (synchronous federated bilevel optimization) on the Message API."""


class ControlStrategy(MessageStrategy):
    """A server-only control (x0-only, f1-only, server-sgd, centralised): rounds with no messages."""


class FedBuffStrategy(AsyncStrategy):
    """FedBuff (buffered asynchronous FedAvg) on the Message API's push / pull."""


class AFBOStrategy(AsyncStrategy):
    """AFBO (anarchic federated bilevel optimization, paper 002) on the Message API's push / pull."""


class ADBOStrategy(AsyncStrategy):
    """ADBO (asynchronous distributed bilevel optimization, Jiao et al. 2023) on the Message API's push / pull."""


class SDBOStrategy(MessageStrategy):
    """SDBO (ADBO's synchronous version: every worker in every round) on the Message API."""


class AFBOGlobalStrategy(AsyncStrategy):
    """afbo-global (ours, beyond paper 002: AFBO with FedNest's global Neumann series on a shared vector,
    without AFBO's bias) on the Message API's push / pull."""


MESSAGE_STRATEGIES = {"zohfl": ZOHFLStrategy, "fedavg": FedAvgStrategy, "fedprox": FedProxStrategy,
                      "scaffold": ScaffoldStrategy, "fedrzo-nn": FedRZOnnStrategy, "fedrzo-bl": FedRZOblStrategy,
                      "fednest": FedNestStrategy, "sdbo": SDBOStrategy, "flwr-fedavg": FlowerFedAvg,
                      **{name: ControlStrategy for name in ("x0-only", "f1-only", "server-sgd", "centralised")}}
LEGACY_STRATEGIES = {"flwr-fedavg": LegacyFlowerFedAvg}  # every other method: LegacyStrategy
ASYNC_STRATEGIES = {"fedbuff": FedBuffStrategy, "afbo": AFBOStrategy, "afbo-global": AFBOGlobalStrategy,
                    "adbo": ADBOStrategy}

__all__ = ["AsyncStrategy", "FlowerFedAvg", "GridTransport", "LegacyFlowerFedAvg", "LegacyStrategy",
           "MessageStrategy", "MESSAGE_STRATEGIES", "LEGACY_STRATEGIES", "ASYNC_STRATEGIES"]
