"""FedBuff (``zofl.methods.fedbuff``): buffered asynchronous FedAvg on push / pull; ``num_rounds`` of ``start`` is
the number of server updates, each of run-config buffer-size replies weighted (1 + staleness)^-a.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.fedbuff import FedBuff, FedBuffParams
from .app import AsyncAppStrategy


class FedBuffStrategy(AsyncAppStrategy):
    """FedBuff's server half (``zofl.methods.fedbuff.FedBuff``) on Flower's push / pull.

    Keyword arguments: the fields of ``FedBuffParams`` (or ``params=FedBuffParams(...)``), and those of
    ``AsyncAppStrategy``."""

    method = FedBuff

    def __init__(self, params: FedBuffParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
