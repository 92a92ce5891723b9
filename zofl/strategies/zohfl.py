"""ZO-HFL (the ZO-HFL paper, Algorithms 1 and 2): each sampled client solves its lower level at x_r +- eta v and
sends two f2 values (or y+ and y-); the server's two-point estimate and step (``zofl.methods.zohfl``). The server
holds no data here: grad f1 = 0.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.zohfl import ZOHFL, ZOHFLParams
from .app import AppStrategy


class ZOHFLStrategy(AppStrategy):
    """ZOHFL's server half (``zofl.methods.zohfl.ZOHFL``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``ZOHFLParams`` (or ``params=ZOHFLParams(...)``), and ``AppStrategy``'s."""

    method = ZOHFL

    def __init__(self, params: ZOHFLParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
