"""FedRZO_nn (paper 001, Algorithm 1, ``zofl.methods.fedrzo_nn``): randomized zeroth-order local steps on the
clients' losses.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedrzo_nn import FedRZOnn, FedRZOnnParams
from .app import AppStrategy


class FedRZOnnStrategy(AppStrategy):
    """FedRZOnn's server half (``zofl.methods.fedrzo_nn.FedRZOnn``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``FedRZOnnParams`` (or ``params=FedRZOnnParams(...)``), and ``AppStrategy``'s."""

    method = FedRZOnn

    def __init__(self, params: FedRZOnnParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
