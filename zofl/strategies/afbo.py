"""AFBO (paper 002, ``zofl.methods.afbo``): anarchic federated bilevel optimization, stale updates, APHE.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``): its problem is ``task=``, an object
of zofl's bilevel protocol (on the ClientApps too: ``zofl.client.train_task``); Flower holds the upper variable x."""
from __future__ import annotations

from ..methods.afbo import AFBO, AFBOParams
from .app import AsyncAppStrategy


class AFBOStrategy(AsyncAppStrategy):
    """AFBO's server half (``zofl.methods.afbo.AFBO``) on Flower's push / pull,
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``AFBOParams`` (or ``params=AFBOParams(...)``), and those of
    ``AsyncAppStrategy``."""

    method = AFBO

    def __init__(self, params: AFBOParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
