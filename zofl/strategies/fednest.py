"""FedNest_SGD (``zofl.methods.fednest``): inner rounds, a Neumann-series hypergradient, the outer step; a round of
``num_rounds`` is several of Flower's communication rounds.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``): its problem is ``task=``, an object
of zofl's bilevel protocol (on the ClientApps too: ``zofl.client.train_task``); Flower holds the upper variable x."""
from __future__ import annotations

from ..methods.fednest import FedNest, FedNestParams
from .app import AppStrategy


class FedNestStrategy(AppStrategy):
    """FedNest's server half (``zofl.methods.fednest.FedNest``) on Flower's rounds (``Strategy.start``),
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``FedNestParams`` (or ``params=FedNestParams(...)``), and those of
    ``AppStrategy``."""

    method = FedNest

    def __init__(self, params: FedNestParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
