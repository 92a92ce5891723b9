"""FedAvg (McMahan et al., 2017) in the same harness as ZO-HFL: same splits, sampling, records.

Each sampled client runs K = 2 H_{i,r} local SGD steps from x_r (the SGD steps a ZO-HFL client
takes in its two solves; 0 for a straggler) with the run-config step ``local-lr`` scheduled by
``local-lr-schedule``, and sends y; the server sets x_{r+1} = x_r + ``server-lr`` (sum_i N_i y_i /
sum_i N_i - x_r) over the clients that replied. The server's own data are not trained on (they
only give x_0 when x0 = pretrained, as for ZO-HFL).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms.fedavg import local_lrs, local_sgd, weighted_mean
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import STREAM_BATCHES
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import Config, ServerOptimizer, Settings, choice, key, positive
from ..tasks import DataSpec, Task


@dataclass(frozen=True)
class ClientLR(Settings):
    """The first-order baselines' client step (Scaffnew's constant gamma too)."""

    local_lr: float = key(0.3, "a number > 0",
        "baselines' client step (docs/results/study.md); Scaffnew's gamma, held constant", "ours", positive)


@dataclass(frozen=True)
class LRSchedule(Settings):
    """How the baselines' client step changes over rounds and steps (Scaffnew's does not)."""

    local_lr_schedule: str = key("round-sqrt", "'constant', 'round-sqrt' or 'step'",
        "baselines' client step: lr, lr/sqrt(r+1), or lr/(t+1) within a round",
        "ours", choice("constant", "round-sqrt", "step"))


@dataclass(frozen=True)
class LocalSGD(ClientLR, LRSchedule):
    """The baselines' and the SGD controls' client steps (local-lr before local-lr-schedule, as ever)."""


@dataclass(frozen=True)
class ServerLR(Settings):
    """The baselines' server step on the averaged update."""

    server_lr: float = key(1.0, "a number > 0",
        "baselines' server step on the averaged update", "ours", positive)


@dataclass(frozen=True)
class FedAvgParams(LocalSGD, ServerLR, ServerOptimizer):
    """FedAvg's (and FedProx's, SCAFFOLD's, FedBuff's) keys: the client steps, the server step and its optimizer."""


class FedAvg(Method):
    name, title = "fedavg", "FedAvg"
    Params = FedAvgParams

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": state["x"].shape}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        x = state["x"]
        if not replies:
            return state, {}
        models = [rep.arrays["x"] for rep in replies]
        y_mean = weighted_mean(models, [rep.num_examples for rep in replies]) if self.robust is None \
            else self.robust(models)  # a robust rule (ours): zofl.algorithms.robust
        return self.server_step(state, y_mean - x, self.hp.server_lr, plan.r + 1), {}


def local_training(cfg: Config, task: Task, spec: DataSpec, pid: int, x: np.ndarray, r: int, H: int,
                   prox_mu: float = 0.0, correction: np.ndarray | None = None, lr_round: int | None = None):
    """The client's K = 2 H local steps from x (H = 0 for a straggler): (y, steps, sum of steps' lrs, N_i).

    ``r`` seeds the minibatches and, unless ``lr_round`` is given (the asynchronous engine passes
    the model version), sets the step schedule."""
    K = 2 * H
    data = task.client_data(spec, pid)
    batches = minibatch_indices(seed_sequence(cfg.seed, r, pid, STREAM_BATCHES), len(data), K, cfg.batch_size)
    sgd = LocalSGD.of(cfg)
    lrs = local_lrs(sgd.local_lr_schedule, sgd.local_lr, r if lr_round is None else lr_round, K)
    grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
    y = local_sgd(grad, x, batches, lrs, prox_mu, correction)
    return y, K, float(lrs.sum()), len(data)


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray],
                prox_mu: float = 0.0) -> Reply:
    """FedAvg's client: K = 2 H local steps from x_r, y sent (FedProx's with its proximal weight ``prox_mu``)."""
    t0 = time.perf_counter()
    y, steps, _, n = local_training(cfg, task, spec, work.pid, work.arrays["x"], work.round, work.H, prox_mu)
    return Reply(work.pid, {"x": y}, n, {"steps": steps, "compute_s": time.perf_counter() - t0})


class FlowerFedAvgRun(FedAvg):
    """FedAvg's server and clients driven by Flower's own FedAvg strategy (``zofl.strategies.flwr_fedavg``):
    the cross-check that our harness adds nothing (``strategy = "flwr-fedavg"``)."""

    name, title = "flwr-fedavg", "FedAvg (Flower's own strategy)"
    Params = LocalSGD  # the clients' steps; the server step is Flower's plain weighted average (no server-lr)
    flower_fedavg = True
