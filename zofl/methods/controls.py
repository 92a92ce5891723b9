"""Controls: server-only runs that make a comparison readable (issue 11). No client is contacted.

A federated method's accuracy is the sum of what it starts from, what the server does on its
own, and what the clients add. These "strategies" measure the first two, on the same splits,
x_0, round count and records as every method, so a table can say what the federated part adds:

* ``x0-only``     -- no rounds' work at all: x stays at x_0 (one SGD epoch on the server's data
  when ``x0 = "pretrained"``). Every round's record is x_0's.
* ``f1-only``     -- ZO-HFL's server steps without the client term: x_{r+1} = x_r - gamma_r
  grad f1~(x_r) on the same server minibatches as ZO-HFL (``zofl.methods.zohfl``, run with no
  client replies: the same code, so the numbers are ZO-HFL's minus the clients').
* ``server-sgd``  -- SGD on the server's data alone, K = 2 H_r steps per round (one client's local
  work in the harness) with the baselines' client step ``local-lr`` / ``local-lr-schedule``: what
  the server's 30% reach with first-order steps and the same budget of rounds.
* ``centralised`` -- the same SGD on all training data (the server's and every client's, pooled):
  the ceiling of the model, not a federated method.

Our definitions (the papers have no controls). Tune ``local-lr`` for server-sgd and centralised
as for the baselines.
"""
from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.fedavg import local_lrs, local_sgd
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import server_step_size, server_update
from ..core.method import CONTROL, Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import ConfigError
from ..tasks.data import ArrayData
from .fedavg import LocalSGD
from .zohfl import ZOHFL, UpperStep

STREAM_CONTROL = streams.CONTROL


class NoClients:
    """What every control shares: a method of kind CONTROL whose ``plan`` contacts nobody."""

    kind = CONTROL

    def plan(self, state: State, r: int, sampled: list[int], stragglers: list[int]) -> list[Work]:
        return []

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {}


class ServerOnly(NoClients, Method):
    """A control whose ``step`` is the server's own work of round r."""

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        r = plan.r
        x, steps = self.step(state["x"], r)
        return {**state, "x": x}, {"server_steps": steps}

    def step(self, x: np.ndarray, r: int) -> tuple[np.ndarray, int]:
        raise NotImplementedError


class X0Only(ServerOnly):
    name, title = "x0-only", "x_0 only (control)"

    def step(self, x: np.ndarray, r: int) -> tuple[np.ndarray, int]:
        return x, 0


class F1Only(NoClients, ZOHFL):
    """ZO-HFL's update with no client reply: the f1 step alone."""

    name, title = "f1-only", "f1 only (control: ZO-HFL's server steps, no clients)"
    Params = UpperStep

    @classmethod
    def check(cls, cfg, task, spec, n: int | None = None) -> None:
        pass  # reads none of the client keys ZO-HFL checks (its Params: UpperStep only)

    @classmethod
    def check_config(cls, cfg) -> None:
        pass  # a control: none of ZO-HFL's client rules

    @classmethod
    def config_warnings(cls, cfg) -> list[str]:
        return []

    clips_coefficients = False  # no client estimate, no coefficients

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        """x_{r+1} = x_r - gamma_r (grad f1~(x_r, xi_r) + 0): Algorithm 1's line 8 with no client estimate."""
        r = plan.r
        x, gamma_r = state["x"], server_step_size(self.hp.gamma, r)
        x_next = server_update(x, self.grad_f1(x, r), np.zeros(x.size), gamma_r)
        return {**state, "x": x_next}, {"f2_est": float("nan"), "gamma_r": gamma_r}


class ServerSGD(ServerOnly):
    name, title = "server-sgd", "server SGD (control: the server's data alone)"
    Params = LocalSGD

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        if not len(self.data()):
            raise ConfigError(f"run-config key 'server-fraction': strategy {self.name!r} needs training data on "
                              f"the server (server-fraction > 0), got {cfg.server_fraction}")

    def data(self) -> ArrayData:
        return self.server_data

    def step(self, x: np.ndarray, r: int) -> tuple[np.ndarray, int]:
        data, cfg = self.data(), self.cfg
        K = 2 * self.round_H({"x": x}, r)
        batches = minibatch_indices(seed_sequence(cfg.seed, r, STREAM_CONTROL), len(data), K, cfg.batch_size)
        grad = lambda p, idx: self.task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
        return local_sgd(grad, x, batches, local_lrs(self.hp.local_lr_schedule, self.hp.local_lr, r, K)), K


class Centralised(ServerSGD):
    name, title = "centralised", "centralised SGD (control: all training data pooled)"

    @cached_property
    def pooled(self) -> ArrayData:
        parts = [self.server_data] + [self.task.client_data(self.spec, i) for i in range(self.m)]
        parts = [p for p in parts if len(p)]
        return ArrayData(np.ascontiguousarray(np.concatenate([p.x for p in parts])),
                         np.concatenate([p.y for p in parts]), parts[0].num_classes)

    def __init__(self, cfg, task, spec):
        Method.__init__(self, cfg, task, spec)  # pooled data are never empty

    def data(self) -> ArrayData:
        return self.pooled


def client_work(cfg, task, spec, work: Work, state) -> Reply:
    raise RuntimeError(f"strategy {cfg.strategy!r} is a server-only control: no client has work")

