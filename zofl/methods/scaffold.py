"""SCAFFOLD (Karimireddy et al., 2020, Algorithm 1, option II) in the same harness.

Server state: x and the control variate c (sent with x every round). Client state: its own
control variate c_i, kept across rounds in the client's Flower Context (``context.state``; Flower
rebuilds simulated clients every round), starting at 0. A sampled client runs K = 2 H_{i,r} steps
y <- y - lr_t (grad loss_i(y) - c_i + c), then c_i+ = c_i - c + (x - y) / sum_t lr_t, and sends
Delta y = y - x and Delta c = c_i+ - c_i. Server: x <- x + ``server-lr`` mean(Delta y),
c <- c + (|S_r| / m) mean(Delta c).

Resume: the server also keeps a copy of every c_i (the sum of the Delta c_i it accepted) in its
state; after a resume it sends each client its own row (``c_i_server``) until that client has
replied once, and a client without a c_i in its state (simulated contexts do not survive a
restart) takes it. A client whose reply was dropped (deadline, fault) has updated its own c_i but
not the server's copy.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..algorithms.fedavg import scaffold_client_control, scaffold_server_update
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import Config
from ..tasks import DataSpec, Task
from .fedavg import FedAvgParams, local_training


class Scaffold(Method):
    """State: x, c (server control variate), c_clients (the server's copy of every c_i) and
    unrestored (1 for a client that may lack its c_i after a resume)."""

    name, title = "scaffold", "SCAFFOLD"
    Params = FedAvgParams

    def init(self) -> State:
        state = super().init()
        n = state["x"].size
        return {**state, "c": np.zeros(n), "c_clients": np.zeros((self.m, n)), "unrestored": np.zeros(self.m, bool)}

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> State:
        return {**arrays, "unrestored": np.ones(self.m, bool)}  # a restarted run's clients may have lost c_i

    def state_dict(self, state: State) -> dict[str, np.ndarray]:
        return {k: v for k, v in state.items() if k != "unrestored"}

    def downlink(self, state: State, r: int, pid: int) -> dict[str, np.ndarray]:
        out = {"x": state["x"], "c": state["c"]}
        if state["unrestored"][pid]:
            out["c_i_server"] = state["c_clients"][pid]
        return out

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"dy": state["x"].shape, "dc": state["x"].shape}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        c_clients, unrestored = state["c_clients"].copy(), state["unrestored"].copy()
        for rep in replies:
            c_clients[rep.pid] += rep.arrays["dc"]
            unrestored[rep.pid] = False
        dys, dcs = [rep.arrays["dy"] for rep in replies], [rep.arrays["dc"] for rep in replies]
        if self.robust is not None and replies:  # a robust rule (ours): one robust Delta y and Delta c
            dys, dcs = [self.robust(dys)] * len(dys), [self.robust(dcs)] * len(dcs)
        x_new, c_new = scaffold_server_update(state["x"], state["c"], dys, dcs, self.hp.server_lr, self.m)
        new = {**state, "c": c_new, "c_clients": c_clients, "unrestored": unrestored}
        if self.hp.server_optimizer == "sgd" or not dys:  # the paper's step, as scaffold_server_update took it
            return {**new, "x": x_new}, {}
        return self.server_step(new, np.mean(dys, axis=0), self.hp.server_lr, plan.r + 1), {}


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    t0 = time.perf_counter()
    x, c = work.arrays["x"], work.arrays["c"]
    if "c_i" in state:
        c_i = state["c_i"]
    elif "c_i_server" in work.arrays:  # the first round after a resume: the server's copy
        c_i = work.arrays["c_i_server"].copy()
    else:
        c_i = np.zeros_like(x)
    y, steps, lr_sum, n = local_training(cfg, task, spec, work.pid, x, work.round, work.H, correction=c - c_i)
    delta_c = scaffold_client_control(c_i, c, x, y, lr_sum) - c_i
    state["c_i"] = c_i + delta_c  # the very float operation of the server's copy (resume stays exact)
    return Reply(work.pid, {"dy": y - x, "dc": delta_c}, n, {"steps": steps, "compute_s": time.perf_counter() - t0})
