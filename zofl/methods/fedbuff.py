"""FedBuff (Nguyen et al., AISTATS 2022, "Federated Learning with Buffered Asynchronous
Aggregation"): asynchronous FedAvg, the first method of the asynchronous engine.

Every client always has work (``zofl.core.asynchronous``): it takes the newest model x^(v) when it
becomes idle, runs K_i = 2 E_i local SGD steps (E_i = the tau schedule at version v, times its
``local-work`` multiplier; the same local solver and step schedule as ``fedavg``) and sends
Delta_i = y_i - x^(v). The server keeps a buffer; when it holds ``buffer-size`` = K replies it
steps

    x^(v+1) = x^(v) + server-lr * (1/K) sum_k (1 + s_k)^(-a) Delta_k,

where s_k = v - v_k is the staleness of reply k (versions since the model it was computed from)
and a = ``staleness-exponent`` (FedBuff's 1/sqrt(1 + s): a = 0.5). Replies are not weighted by
the clients' example counts (FedBuff's Algorithm 1; ours to change).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms.lower_level import local_steps
from ..core.method import ASYNC, Method, State
from ..core.protocol import Reply, Work
from ..core.sampling import client_local_steps, per_client
from ..settings import Config, key, nonnegative
from ..tasks import DataSpec, Task
from .fedavg import FedAvgParams, local_training


def staleness_weight(s: int, a: float) -> float:
    """(1 + s)^-a."""
    return float((1.0 + s) ** -a)


def buffered_delta(deltas: list[np.ndarray], staleness: list[int], a: float, combine=None) -> tuple[np.ndarray, int]:
    """(sum_k (1 + s_k)^-a Delta_k, K): FedBuff's step is x + server_lr (1/K) times it (Algorithm 1); with
    ``combine`` (a robust rule, ours) (combine([(1 + s_k)^-a Delta_k]), 1)."""
    if combine is not None:
        return combine([staleness_weight(s, a) * d for d, s in zip(deltas, staleness)]), 1
    acc = np.zeros_like(deltas[0])
    for d, s in zip(deltas, staleness):
        acc += staleness_weight(s, a) * d
    return acc, len(deltas)



@dataclass(frozen=True)
class FedBuffParams(FedAvgParams):
    """FedBuff."""

    staleness_exponent: float = key(0.5, "a number >= 0",
        "fedbuff: a reply s versions stale is weighted (1 + s)^-a (FedBuff's 1/sqrt(1 + s): a = 0.5)",
        "paper", nonnegative)


class FedBuff(Method):
    name, title = "fedbuff", "FedBuff"
    kind = ASYNC
    Params = FedBuffParams

    @classmethod
    def updates_per_step(cls, cfg) -> tuple[str, int]:
        return "buffer-size", cfg.buffer_size

    def plan_task(self, state: State, version: int, task: int, pid: int) -> Work:
        """Client ``pid``'s task number ``task`` on x^(version)."""
        H = local_steps(version, self.cfg.tau, self.cfg.local_steps)
        E = client_local_steps(H, per_client(self.cfg.local_work, pid))
        return Work(pid, task, E, {"x": state["x"]}, {"version": version})

    def task_steps(self, work: Work) -> int:
        """Local steps a task costs (for the simulated clock): 2 E_i."""
        return 2 * work.H

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"dy": state["x"].shape}

    def update_async(self, state: State, version: int, replies: list[Reply],
                     staleness: list[int]) -> tuple[State, dict[str, Any]]:
        delta, count = buffered_delta([rep.arrays["dy"] for rep in replies], staleness, self.hp.staleness_exponent,
                                      self.robust)
        return self.server_step(state, delta, self.hp.server_lr, version + 1, count), {}


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    t0 = time.perf_counter()
    x = work.arrays["x"]
    y, steps, _, n = local_training(cfg, task, spec, work.pid, x, work.round, work.H,
                                    lr_round=int(work.config["version"]))
    return Reply(work.pid, {"dy": y - x}, n, {"steps": steps, "compute_s": time.perf_counter() - t0})
