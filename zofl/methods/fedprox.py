"""FedProx (Li et al., 2020): FedAvg whose clients minimise loss_i(y) + (prox_mu / 2) ||y - x_r||^2.

Same K = 2 H_{i,r} local steps and server average as ``fedavg``; ``prox-mu`` is the run-config key.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.protocol import Reply, Work
from ..settings import Config, key, nonnegative
from ..tasks import DataSpec, Task
from .fedavg import FedAvg, FedAvgParams
from .fedavg import client_work as fedavg_client_work


@dataclass(frozen=True)
class FedProxParams(FedAvgParams):
    """FedProx: FedAvg's keys and the proximal weight."""

    prox_mu: float = key(0.01, "a number >= 0", "FedProx proximal weight", "ours", nonnegative)


class FedProx(FedAvg):
    name, title = "fedprox", "FedProx"
    Params = FedProxParams


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    """FedAvg's client with the proximal term (mu/2)||y - x_r||^2, mu = prox-mu (its typed Params)."""
    return fedavg_client_work(cfg, task, spec, work, state, FedProxParams.of(cfg).prox_mu)
