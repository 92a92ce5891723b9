"""FedMSPP (``zofl.methods.fedmspp``): each client solves a proximal subproblem on one minibatch.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedmspp import FedMSPP, FedMSPPParams
from .app import AppStrategy


class FedMSPPStrategy(AppStrategy):
    """FedMSPP's server half (``zofl.methods.fedmspp.FedMSPP``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedMSPPParams`` (or ``params=FedMSPPParams(...)``), and ``AppStrategy``'s."""

    method = FedMSPP

    def __init__(self, params: FedMSPPParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
