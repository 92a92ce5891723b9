"""FedAvg in zofl's harness (``zofl.methods.fedavg``): K = 2 H_{i,r} local SGD steps with zofl's seeded minibatches
and step schedule, the server step ``server_lr`` on the weighted mean.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedavg import FedAvg, FedAvgParams
from .app import AppStrategy


class FedAvgStrategy(AppStrategy):
    """FedAvg's server half (``zofl.methods.fedavg.FedAvg``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedAvgParams`` (or ``params=FedAvgParams(...)``), and ``AppStrategy``'s."""

    method = FedAvg

    def __init__(self, params: FedAvgParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
