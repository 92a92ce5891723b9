"""SCAFFOLD (Karimireddy et al., 2020, Algorithm 1, option II) in the same harness.

Server state: x and the control variate c (sent with x every round). Client state: its own
control variate c_i, kept across rounds in the client's Flower Context (``context.state``; Flower
rebuilds simulated clients every round), starting at 0. A sampled client runs K = 2 H_{i,r} steps
y <- y - lr_t (grad loss_i(y) - c_i + c), then c_i+ = c_i - c + (x - y) / sum_t lr_t, and sends
Delta y = y - x and Delta c = c_i+ - c_i. Server: x <- x + ``server-lr`` mean(Delta y),
c <- c + (|S_r| / m) mean(Delta c).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import Scalar

from ..algorithms.fedavg import scaffold_client_control, scaffold_server_update
from ..config import Config
from ..tasks import DataSpec, Task
from .base import Reply, RoundStrategy
from .fedavg import local_training


class Scaffold(RoundStrategy):
    name, title = "scaffold", "SCAFFOLD"

    c: np.ndarray | None = None  # the server control variate, 0 before round 1

    def downlink_extra(self) -> list[np.ndarray]:
        if self.c is None:
            self.c = np.zeros_like(self.x)
        return [self.c]

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        return [(n,), (n,)]

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        x_new, self.c = scaffold_server_update(x, self.c, [rep.arrays[0] for rep in replies],
                                               [rep.arrays[1] for rep in replies], self.cfg.server_lr, self.m)
        return x_new, {}


def client_fit(cfg: Config, task: Task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
               config: dict[str, Scalar], state: dict[str, np.ndarray]):
    t0 = time.perf_counter()
    x, c = parameters
    c_i = state.get("c_i", np.zeros_like(x))
    y, steps, lr_sum, n = local_training(cfg, task, spec, pid, x, config, correction=c - c_i)
    c_i_new = scaffold_client_control(c_i, c, x, y, lr_sum)
    state["c_i"] = c_i_new
    return [y - x, c_i_new - c_i], n, {"pid": pid, "sampled": True, "steps": steps,
                                       "compute_s": time.perf_counter() - t0}
