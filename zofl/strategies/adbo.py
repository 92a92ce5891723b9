"""ADBO (asynchronous) and SDBO (synchronous), Jiao et al. 2023 (``zofl.methods.adbo``): cutting planes and
primal-dual steps.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``): its problem is ``task=``, an object
of zofl's bilevel protocol (on the ClientApps too: ``zofl.client.train_task``); Flower holds the upper variable x."""
from __future__ import annotations

from ..methods.adbo import ADBO, SDBO, ADBOParams, SDBOParams
from .app import AppStrategy, AsyncAppStrategy


class ADBOStrategy(AsyncAppStrategy):
    """ADBO's server half (``zofl.methods.adbo.ADBO``) on Flower's push / pull,
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``ADBOParams`` (or ``params=ADBOParams(...)``), and those of
    ``AsyncAppStrategy``."""

    method = ADBO

    def __init__(self, params: ADBOParams | None = None, **kwargs):
        super().__init__(params, **kwargs)


class SDBOStrategy(AppStrategy):
    """SDBO's server half (``zofl.methods.adbo.SDBO``) on Flower's rounds (``Strategy.start``),
    on the user's ``task``.

    Keyword arguments: ``task``, the fields of ``SDBOParams`` (or ``params=SDBOParams(...)``), and those of
    ``AppStrategy``."""

    method = SDBO

    def __init__(self, params: SDBOParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
