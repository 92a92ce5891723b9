"""FedRZO_bl (paper 001, Algorithm 2, ``zofl.methods.fedrzo_bl``): zeroth-order upper steps over lower-level FedAvg
rounds; a round of ``num_rounds`` is several of Flower's communication rounds.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``): its problem is ``task=``, an object
of zofl's bilevel protocol (on the ClientApps too: ``zofl.client.train_task``); Flower holds the upper variable x."""
from __future__ import annotations

from ..methods.fedrzo_bl import FedRZObl, FedRZOblParams
from .app import AppStrategy


class FedRZOblStrategy(AppStrategy):
    """FedRZObl's server half (``zofl.methods.fedrzo_bl.FedRZObl``) on Flower's rounds (``Strategy.start``),
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``FedRZOblParams`` (or ``params=FedRZOblParams(...)``), and those of
    ``AppStrategy``."""

    method = FedRZObl

    def __init__(self, params: FedRZOblParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
