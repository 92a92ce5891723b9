"""FedAvgM (``zofl.methods.fedavgm``): FedAvg with server momentum.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedavgm import FedAvgM, FedAvgMParams
from .app import AppStrategy


class FedAvgMStrategy(AppStrategy):
    """FedAvgM's server half (``zofl.methods.fedavgm.FedAvgM``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedAvgMParams`` (or ``params=FedAvgMParams(...)``), and ``AppStrategy``'s."""

    method = FedAvgM

    def __init__(self, params: FedAvgMParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
