"""Scaffnew (ProxSkip, ``zofl.methods.scaffnew``): a shared coin decides the local steps; the control variates h_i
are kept by the server, as in the harness, and sent to their client.

The method as a Flower strategy for a user's own App (``zofl.strategies.app``)."""
from __future__ import annotations

from ..methods.scaffnew import Scaffnew, ScaffnewParams
from .app import AppStrategy


class ScaffnewStrategy(AppStrategy):
    """Scaffnew's server half (``zofl.methods.scaffnew.Scaffnew``) on Flower's rounds (``Strategy.start``).

    Keyword arguments: the fields of ``ScaffnewParams`` (or ``params=ScaffnewParams(...)``), and ``AppStrategy``'s."""

    method = Scaffnew

    def __init__(self, params: ScaffnewParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
