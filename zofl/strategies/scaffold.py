"""SCAFFOLD (option II, ``zofl.methods.scaffold``): the server sends x and c; each client keeps its control variate
c_i in its Flower Context (``zofl.client.train`` does it) and sends Delta y and Delta c.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedavg import FedAvgParams
from ..methods.scaffold import Scaffold
from .app import AppStrategy


class ScaffoldStrategy(AppStrategy):
    """Scaffold's server half (``zofl.methods.scaffold.Scaffold``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedAvgParams`` (or ``params=FedAvgParams(...)``), and ``AppStrategy``'s."""

    method = Scaffold

    def __init__(self, params: FedAvgParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
