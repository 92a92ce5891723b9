"""afbo-global (ours, ``zofl.methods.afbo_global``): AFBO's server with FedNest's global Neumann series.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``): its problem is ``task=``, an object
of zofl's bilevel protocol (on the ClientApps too: ``zofl.client.train_task``); Flower holds the upper variable x."""
from __future__ import annotations

from ..methods.afbo_global import AFBOGlobal, AFBOGlobalParams
from .app import AsyncAppStrategy


class AFBOGlobalStrategy(AsyncAppStrategy):
    """AFBOGlobal's server half (``zofl.methods.afbo_global.AFBOGlobal``) on Flower's push / pull,
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``AFBOGlobalParams`` (or ``params=AFBOGlobalParams(...)``), and those of
    ``AsyncAppStrategy``."""

    method = AFBOGlobal

    def __init__(self, params: AFBOGlobalParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
