"""FedProx (Li et al., 2020): FedAvg whose clients minimise loss_i(y) + (prox_mu / 2) ||y - x_r||^2.

Same K = 2 H_{i,r} local steps and server average as ``fedavg``; ``prox-mu`` is the run-config key.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import key, nonnegative
from .fedavg import FedAvg, FedAvgParams, make_client_work


@dataclass(frozen=True)
class FedProxParams(FedAvgParams):
    """FedProx: FedAvg's keys and the proximal weight."""

    prox_mu: float = key(0.01, "a number >= 0", "FedProx proximal weight", "ours", nonnegative)


class FedProx(FedAvg):
    name, title = "fedprox", "FedProx"
    Params = FedProxParams


client_work = make_client_work("prox-mu")
