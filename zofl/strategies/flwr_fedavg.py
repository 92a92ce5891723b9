"""Flower's own FedAvg strategy (``flwr.server.strategy.FedAvg``), driving our FedAvg clients.

The peer cross-check for ``fedavg``: the same clients, data, x_0 and seed, but Flower's client
sampling (``fraction_fit`` = beta, its own random choice) and Flower's weighted averaging.
Evaluation and records come from the same ``RoundStrategy`` code as every other strategy. Flower's
sampling is not seeded by us, so runs with beta < 1 are not reproducible; with beta = 1 they are.
Bad replies (``reply_problem``) are dropped before Flower's averaging; the record's ``sampled`` are
the clients that replied (Flower does not say whom it sampled when a client fails).
"""
from __future__ import annotations

import time

import numpy as np
from flwr.common import Parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg as _FlowerFedAvg

from ..algorithms.lower_level import local_steps
from ..config import ConfigError
from .base import RoundStrategy, _nbytes, log, reply_problem
from .fedavg import client_fit  # noqa: F401  (the clients are our FedAvg clients)


class FlowerFedAvg(_FlowerFedAvg):
    name, title = "flwr-fedavg", "Flower FedAvg"

    def __init__(self, cfg, task, spec, writer):
        if cfg.resume:
            raise ConfigError("run-config key 'resume': strategy flwr-fedavg (the cross-check) cannot resume; "
                              "use fedavg")
        self.cfg, self.writer = cfg, writer
        self.rec = RoundStrategy(cfg, task, spec, writer)  # x_0, evaluation, records, summary
        self.rec.name, self.rec.title = self.name, self.title
        m = cfg.num_clients
        super().__init__(fraction_fit=cfg.beta, fraction_evaluate=0.0, min_fit_clients=1,
                         min_evaluate_clients=0, min_available_clients=m, on_fit_config_fn=self.fit_config,
                         accept_failures=True)

    def rounds_to_run(self) -> int:
        return self.rec.rounds_to_run()

    def fit_config(self, server_round: int) -> dict:
        r = server_round - 1
        return {"round": r, "H": local_steps(r, self.cfg.tau, self.cfg.local_steps)}

    def initialize_parameters(self, client_manager) -> Parameters:
        return self.rec.initialize_parameters(client_manager)

    def configure_fit(self, server_round, parameters, client_manager):
        t0 = time.perf_counter()
        ins = super().configure_fit(server_round, parameters, client_manager)
        self.last, self.n = parameters, parameters_to_ndarrays(parameters)[0].size
        cfg = self.fit_config(server_round)
        self.rec.round_info = {"t0": t0, "r": cfg["round"], "H": cfg["H"], "stragglers": [],
                               "downlink_bytes": _nbytes(parameters) * len(ins)}
        return ins

    def aggregate_fit(self, server_round, results, failures):
        # Flower's FedAvg averages whatever arrives: drop bad replies first, as RoundStrategy does
        good = []
        for proxy, res in results:
            problem = reply_problem(parameters_to_ndarrays(res.parameters), [(self.n,)], self.cfg.reply_max_abs)
            if problem:
                log.warning("round %d: dropped client %s: %s", server_round, res.metrics.get("pid"), problem)
            else:
                good.append((proxy, res))
        rejected = len(results) - len(good)
        params, metrics = super().aggregate_fit(server_round, good, failures)
        if params is None or not all(np.isfinite(a).all() for a in parameters_to_ndarrays(params)):
            params = self.last  # no usable reply, or a non-finite average: keep x_r
        replied = sorted(int(res.metrics["pid"]) for _, res in results)
        results = good
        computes = [float(res.metrics["compute_s"]) for _, res in results]
        self.rec.round_info.update(
            sampled=replied, participants=len(results),
            failures=len(failures) + rejected, rejected=rejected, dropped=len(failures) + rejected,
            uplink_bytes=sum(_nbytes(res.parameters) for _, res in results),
            client_compute_s=sum(computes), client_compute_max_s=max(computes, default=0.0),
            local_steps=sum(int(res.metrics["steps"]) for _, res in results))
        return params, metrics

    def evaluate(self, server_round, parameters):
        return self.rec.evaluate(server_round, parameters)
