"""Strategies, one module each. A strategy module provides a Flower ``Strategy`` subclass (server)
and a ``client_fit`` function (the client's work in a round); ``STRATEGIES`` names them for the
run-config key ``strategy``. See docs/architecture.md, "Add a strategy"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import fedavg, fedprox, fedrzo_bl, fedrzo_nn, flwr_fedavg, scaffold, zohfl


@dataclass(frozen=True)
class StrategyEntry:
    server: type  # Strategy subclass: (cfg, task, spec, writer) -> Strategy
    client_fit: Callable  # (cfg, task, spec, pid, parameters, config, state) -> (ndarrays, num_examples, metrics)


STRATEGIES = {
    "zohfl": StrategyEntry(zohfl.ZOHFL, zohfl.client_fit),
    "fedavg": StrategyEntry(fedavg.FedAvg, fedavg.client_fit),
    "fedprox": StrategyEntry(fedprox.FedProx, fedprox.client_fit),
    "scaffold": StrategyEntry(scaffold.Scaffold, scaffold.client_fit),
    "flwr-fedavg": StrategyEntry(flwr_fedavg.FlowerFedAvg, flwr_fedavg.client_fit),
    "fedrzo-nn": StrategyEntry(fedrzo_nn.FedRZOnn, fedrzo_nn.client_fit),
    "fedrzo-bl": StrategyEntry(fedrzo_bl.FedRZObl, fedrzo_bl.client_fit),
}
