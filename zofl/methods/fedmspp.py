"""FedMSPP (federated minibatch stochastic proximal point; Yuan and Li, NeurIPS 2022) in the same harness:
server and client halves over ``zofl.algorithms.fedmspp``.

A sampled client draws ONE minibatch B of ``batch-size`` examples of its data (seeded by (seed, r,
client), as every baseline's) and approximately solves min_y f_i(y; B) + (1 / (2 eta)) ||y - x_r||^2,
eta = ``mspp-lr``, with K = 2 H_{i,r} gradient steps on that batch (the local work of every baseline:
0 for a straggler, which returns x_r), step ``local-lr`` scheduled by ``local-lr-schedule``; it sends
y. The server sets x_{r+1} = (1/|S_r|) sum_i y_i over the clients that replied (the paper's uniform
average; ``aggregation`` other than mean: the robust rule).

Choices the paper leaves open (ours, docs/baselines.md): the inexact solver (plain gradient steps,
their number and step as for FedProx), eta's value, and a constant eta over rounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms.fedavg import local_lrs
from ..algorithms.fedmspp import prox_solve, server_average
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import STREAM_BATCHES
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import Config, key, positive
from ..tasks import DataSpec, Task
from .fedavg import LocalSGD


@dataclass(frozen=True)
class FedMSPPParams(LocalSGD):
    """FedMSPP: the inner solver's steps (``local-lr``, ``local-lr-schedule``) and the proximal step eta."""

    mspp_lr: float = key(1.0, "a number > 0",
        "FedMSPP's proximal step eta: each client solves min_y f_i(y; B) + ||y - x||^2 / (2 eta) on one "
        "minibatch B per round (ours: 1, so that the default local-lr keeps the inner steps stable)", "ours",
        positive)


class FedMSPP(Method):
    name, title = "fedmspp", "FedMSPP"
    Params = FedMSPPParams

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": state["x"].shape}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        if not replies:
            return state, {}
        ys = [rep.arrays["x"] for rep in replies]
        return {**state, "x": server_average(ys) if self.robust is None else self.robust(ys)}, {}


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    t0 = time.perf_counter()
    hp = FedMSPPParams.of(cfg)
    K = 2 * work.H
    data = task.client_data(spec, work.pid)
    (batch,) = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES), len(data), 1,
                                 cfg.batch_size)  # the round's one minibatch
    xb, yb = data.x[batch], data.y[batch]
    lrs = local_lrs(hp.local_lr_schedule, hp.local_lr, work.round, K)
    y = prox_solve(lambda p: task.grad(p, xb, yb), work.arrays["x"], hp.mspp_lr, lrs)
    return Reply(work.pid, {"x": y}, len(data), {"steps": K, "compute_s": time.perf_counter() - t0})
