"""FedRZO_nn (paper 001, Algorithm 1): server and client halves over ``zofl.algorithms.fedrzo``.

Server: sends x_r to the sampled clients and averages the x_{i,T_{r+1}} they return (1/|S_r|; the
paper's 1/m with every client taking part). Client i: H local zeroth-order steps with its own
sphere samples v in eta S and the Moreau term of its local set X_i (a box, a ball or none, chosen
per client by ``local-sets``), step ``zo-lr``.

Choices (run-config keys): the client objective is the paper's f_i = (1/2) sum over the client's
examples of the squared loss + (lambda/2)||x||^2 (``loss-scale = sum``; its stochastic version
scales a minibatch mean by N_i) or the mean instead (``loss-scale = mean``); lambda = ``l2``;
both function values of a step use the same minibatch; H = ``local-steps`` (or the tau schedule).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..algorithms.fedrzo import local_zo_steps, project_ball0, project_box
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence, sphere_directions
from ..algorithms.zohfl import STREAM_BATCHES, STREAM_DIRECTIONS
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import Config, Settings, Smoothing, choice, key, positive
from ..tasks import DataSpec, Task


def local_set(cfg: Config, pid: int) -> Callable[[np.ndarray], np.ndarray]:
    """P_{X_i}: client ``pid`` takes the (pid mod k)-th entry of ``local-sets``."""
    hp = FedRZOnnParams.of(cfg)
    kinds = hp.local_sets.split(",")
    kind = kinds[pid % len(kinds)]
    if kind == "box":
        return lambda x: project_box(x, hp.box_bound)
    if kind == "ball":
        return lambda x: project_ball0(x, hp.set_radius)
    return lambda x: x


@dataclass(frozen=True)
class ZOLocal(Settings):
    """FedRZO's local zeroth-order steps and local sets (FedRZO_nn, FedRZO_bl)."""

    zo_lr: float = key(1e-5, "a number > 0",
        "FedRZO local step gamma (paper 001: 1e-5)", "paper", positive)
    local_sets: str = key("box,ball", "a comma list of box, ball, none",
        "FedRZO local sets X_i: client i takes entry i mod k",
        "ours", lambda v: bool(v) and all(k in ("box", "ball", "none") for k in v.split(",")), example="box")
    box_bound: float = key(1.0, "a number > 0",
        "X_i = [-b, b]^n for a box client", "ours", positive)
    set_radius: float = key(10.0, "a number > 0",
        "X_i = {||x|| <= radius} for a ball client", "ours", positive)


@dataclass(frozen=True)
class FedRZOnnParams(Smoothing, ZOLocal):
    """FedRZO_nn (paper 001, Algorithm 1)."""

    loss_scale: str = key("mean", "'sum' or 'mean'",
        "FedRZO client objective: the mean over the client's examples (a per-sample oracle), or the sum as "
        "written in the paper's Sec. 5.1 (diverges with gamma = 1e-5: docs/fedrzo.md)", "ours", choice("sum", "mean"))


class FedRZOnn(Method):
    name, title = "fedrzo-nn", "FedRZO_nn"
    Params = FedRZOnnParams

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": state["x"].shape}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        if not replies:
            return state, {}
        xs = [rep.arrays["x"] for rep in replies]  # the paper's mean, or a robust rule (ours)
        return {**state, "x": np.mean(xs, axis=0) if self.robust is None else self.robust(xs)}, {}


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    hp = FedRZOnnParams.of(cfg)
    t0 = time.perf_counter()
    pid, r, H = work.pid, work.round, work.H
    data = task.client_data(spec, pid)
    x = work.arrays["x"]
    scale = float(len(data)) if hp.loss_scale == "sum" else 1.0
    lam = cfg.l2

    def loss(p: np.ndarray, idx: np.ndarray) -> float:
        return scale * task.loss(p, data.x[idx], data.y[idx]) + 0.5 * lam * float(p @ p)

    batches = minibatch_indices(seed_sequence(cfg.seed, r, pid, STREAM_BATCHES), len(data), H, cfg.batch_size)
    dirs = sphere_directions(seed_sequence(cfg.seed, r, pid, STREAM_DIRECTIONS), H, x.size)
    y = local_zo_steps(loss, x, batches, dirs, hp.zo_lr, hp.eta, local_set(cfg, pid))
    return Reply(pid, {"x": y}, len(data), {"steps": H, "compute_s": time.perf_counter() - t0})
