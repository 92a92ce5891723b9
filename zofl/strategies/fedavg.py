"""FedAvg (McMahan et al., 2017) in the same harness as ZO-HFL: same splits, sampling, records.

Each sampled client runs K = 2 H_{i,r} local SGD steps from x_r (the SGD steps a ZO-HFL client
takes in its two solves; 0 for a straggler) with the run-config step ``local-lr`` scheduled by
``local-lr-schedule``, and sends y; the server sets x_{r+1} = x_r + ``server-lr`` (sum_i N_i y_i /
sum_i N_i - x_r) over the clients that replied. The server's own data are not trained on (they
only give x_0 when x0 = pretrained, as for ZO-HFL).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import Scalar

from ..algorithms.fedavg import local_lrs, local_sgd, weighted_mean
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import STREAM_BATCHES
from ..config import Config
from ..tasks import DataSpec, Task
from .base import Reply, RoundStrategy, client_steps


class FedAvg(RoundStrategy):
    name, title = "fedavg", "FedAvg"

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        return [(n,)]

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        if not replies:
            return x.copy(), {}
        y_mean = weighted_mean([rep.arrays[0] for rep in replies], [rep.num_examples for rep in replies])
        return x + self.cfg.server_lr * (y_mean - x), {}


def local_training(cfg: Config, task: Task, spec: DataSpec, pid: int, x: np.ndarray, config: dict[str, Scalar],
                   prox_mu: float = 0.0, correction: np.ndarray | None = None):
    """The client's K = 2 H local steps from x (H = 0 for a straggler): (y, steps, sum of steps' lrs)."""
    r = int(config["round"])
    H = client_steps(pid, config)
    K = 2 * H
    data = task.client_data(spec, pid)
    batches = minibatch_indices(seed_sequence(cfg.seed, r, pid, STREAM_BATCHES), len(data), K, cfg.batch_size)
    lrs = local_lrs(cfg.local_lr_schedule, cfg.local_lr, r, K)
    grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
    y = local_sgd(grad, x, batches, lrs, prox_mu, correction)
    return y, K, float(lrs.sum()), len(data)


def make_client_fit(prox_mu_key: str | None = None):
    """client_fit for FedAvg (no proximal term) or FedProx (proximal weight from ``prox_mu_key``)."""

    def client_fit(cfg: Config, task: Task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
                   config: dict[str, Scalar], state: dict[str, np.ndarray]):
        t0 = time.perf_counter()
        prox_mu = cfg[prox_mu_key] if prox_mu_key else 0.0
        y, steps, _, n = local_training(cfg, task, spec, pid, parameters[0], config, prox_mu)
        return [y], n, {"pid": pid, "sampled": True, "steps": steps, "compute_s": time.perf_counter() - t0}

    return client_fit


client_fit = make_client_fit()
