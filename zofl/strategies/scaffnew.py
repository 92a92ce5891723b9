"""Scaffnew (ProxSkip, ``zofl.methods.scaffnew``): a shared coin decides the local steps; each client keeps its
control variate h_i in its Flower Context (``zofl.client.train`` does it) and settles it by the next x it receives;
the server sends its copy of h_i only to a client that missed that x (partial participation, a straggler, a resume).

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
