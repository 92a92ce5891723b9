"""FedProx (Li et al., 2020): FedAvg whose clients minimise loss_i(y) + (prox_mu / 2) ||y - x_r||^2.

Same K = 2 H_{i,r} local steps and server average as ``fedavg``; ``prox-mu`` is the run-config key.
"""
from __future__ import annotations

from .fedavg import FedAvg, make_client_work


class FedProx(FedAvg):
    name, title = "fedprox", "FedProx"
    params = FedAvg.params + ("prox-mu",)


client_work = make_client_work("prox-mu")
