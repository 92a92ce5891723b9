"""SCAFFOLD (Karimireddy et al., 2020, Algorithm 1, option II) in the same harness.

Server state: x and the control variate c (sent with x every round). Client state: its own
control variate c_i, kept across rounds in the client's Flower Context (``context.state``; Flower
rebuilds simulated clients every round), starting at 0. A sampled client runs K = 2 H_{i,r} steps
y <- y - lr_t (grad loss_i(y) - c_i + c), then c_i+ = c_i - c + (x - y) / sum_t lr_t, and sends
Delta y = y - x and Delta c = c_i+ - c_i. Server: x <- x + ``server-lr`` mean(Delta y),
c <- c + (|S_r| / m) mean(Delta c).

Resume: the server also keeps a copy of every c_i (the sum of the Delta c_i it accepted) in its
checkpoint; after a resume it sends them all (an (m, n) array) until every client has replied once,
and a client without a c_i in its state (simulated contexts do not survive a restart) takes its row. A client
whose reply was dropped (deadline, fault) has updated its own c_i but not the server's copy.
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
    c_clients: np.ndarray | None = None  # the server's copy of every c_i (for resume)
    unrestored: frozenset = frozenset()  # clients that may lack their c_i after a resume

    def downlink_extra(self) -> list[np.ndarray]:
        if self.c is None:
            self.c = np.zeros_like(self.x)
            self.c_clients = np.zeros((self.m, self.x.size))
        if self.unrestored:
            return [self.c, self.c_clients]
        return [self.c]

    def state_dict(self) -> dict[str, np.ndarray]:
        return {} if self.c is None else {"c": self.c, "c_clients": self.c_clients}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if "c" in state:
            self.c, self.c_clients, self.unrestored = state["c"], state["c_clients"], frozenset(range(self.m))

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        return [(n,), (n,)]

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        for rep in replies:
            self.c_clients[rep.pid] += rep.arrays[1]
        self.unrestored -= {rep.pid for rep in replies}
        x_new, self.c = scaffold_server_update(x, self.c, [rep.arrays[0] for rep in replies],
                                               [rep.arrays[1] for rep in replies], self.cfg.server_lr, self.m)
        return x_new, {}


def client_fit(cfg: Config, task: Task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
               config: dict[str, Scalar], state: dict[str, np.ndarray]):
    t0 = time.perf_counter()
    x, c = parameters[:2]
    if "c_i" in state:
        c_i = state["c_i"]
    elif len(parameters) == 3:  # the first round after a resume: the server's copy
        c_i = parameters[2][pid].copy()
    else:
        c_i = np.zeros_like(x)
    y, steps, lr_sum, n = local_training(cfg, task, spec, pid, x, config, correction=c - c_i)
    delta_c = scaffold_client_control(c_i, c, x, y, lr_sum) - c_i
    state["c_i"] = c_i + delta_c  # the very float operation of the server's copy (resume stays exact)
    return [y - x, delta_c], n, {"pid": pid, "sampled": True, "steps": steps,
                                       "compute_s": time.perf_counter() - t0}
