"""The methods, one module each: the server half (a ``zofl.core.method.Method`` subclass, no
Flower) and the client half (``client_work(cfg, task, spec, work, state) -> Reply``, no Flower).
``METHODS`` names them for the run-config key ``strategy``; the Flower strategies that drive them
are in ``zofl.strategies``. See docs/architecture.md, "Add a method"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import (
    adbo,
    afbo,
    afbo_global,
    controls,
    fedavg,
    fedbuff,
    fednest,
    fedprox,
    fedrzo_bl,
    fedrzo_nn,
    scaffold,
    zohfl,
)


@dataclass(frozen=True)
class MethodEntry:
    server: type  # Method subclass: (cfg, task, spec) -> Method
    client_work: Callable  # (cfg, task, spec, work, state) -> Reply


METHODS = {
    "zohfl": MethodEntry(zohfl.ZOHFL, zohfl.client_work),
    "fedavg": MethodEntry(fedavg.FedAvg, fedavg.client_work),
    "fedprox": MethodEntry(fedprox.FedProx, fedprox.client_work),
    "scaffold": MethodEntry(scaffold.Scaffold, scaffold.client_work),
    # Flower's own FedAvg strategy (zofl.strategies.flwr_fedavg) drives our FedAvg clients
    "flwr-fedavg": MethodEntry(fedavg.FedAvg, fedavg.client_work),
    "fedrzo-nn": MethodEntry(fedrzo_nn.FedRZOnn, fedrzo_nn.client_work),
    "fedrzo-bl": MethodEntry(fedrzo_bl.FedRZObl, fedrzo_bl.client_work),
    "fedbuff": MethodEntry(fedbuff.FedBuff, fedbuff.client_work),
    "afbo": MethodEntry(afbo.AFBO, afbo.client_work),
    "afbo-global": MethodEntry(afbo_global.AFBOGlobal, afbo_global.client_work),  # ours, beyond paper 002
    "fednest": MethodEntry(fednest.FedNest, fednest.client_work),
    "adbo": MethodEntry(adbo.ADBO, adbo.client_work),
    "sdbo": MethodEntry(adbo.SDBO, adbo.client_work),
    # controls: server-only runs, no client is contacted (zofl.methods.controls)
    **{name: MethodEntry(cls, controls.client_work) for name, cls in controls.CONTROLS.items()},
}
