"""FedProx (``zofl.methods.fedprox``): FedAvg's local steps with the proximal term (mu/2)||y - x_r||^2.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedprox import FedProx, FedProxParams
from .app import AppStrategy


class FedProxStrategy(AppStrategy):
    """FedProx's server half (``zofl.methods.fedprox.FedProx``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedProxParams`` (or ``params=FedProxParams(...)``), and ``AppStrategy``'s."""

    method = FedProx

    def __init__(self, params: FedProxParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
