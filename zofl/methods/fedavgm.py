"""FedAvgM (Hsu, Qi and Brown, 2019, "Measuring the Effects of Non-Identical Data Distribution for Federated
Visual Classification"): FedAvg with server momentum, v <- beta v + (x_r - y_mean), x_{r+1} = x_r - server-lr v.

The worked example of docs/architecture.md ("Add a method"): FedAvg's clients and update, whose server step goes
through the server-step hook (``Method.server_step``, ``zofl.algorithms.server_opt``) with momentum: this module
and one line in ``zofl.methods.REGISTERED``. The same step as strategy fedavg with server-optimizer = momentum
(tests/test_server_opt.py), as a method of its own with only the keys it reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import ServerMomentum
from .fedavg import FedAvg, LocalSGD, ServerLR, client_work  # noqa: F401  (client_work: FedAvg's, registered with it)


@dataclass(frozen=True)
class FedAvgMParams(LocalSGD, ServerLR, ServerMomentum):
    """FedAvgM: FedAvg's client steps and server step, and the server momentum beta."""


class FedAvgM(FedAvg):
    name, title = "fedavgm", "FedAvgM"
    Params = FedAvgMParams
    server_optimizer = "momentum"
