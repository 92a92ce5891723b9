"""ZO-HFL on Flower: a thin adapter over ``zofl.algorithms.zohfl``.

Server (``ZOHFL``, a ``flwr.server.strategy.Strategy`` via ``RoundStrategy``) -- Algorithm 1:
  configure_fit  (RoundStrategy) sample S_r, mark stragglers (H = 0), send x_r with the round
                 number, H_{i,r} and S_r; directions v_{i,r} are not sent: both sides derive them
                 from (seed, round, client id).
  aggregate      f2(x_r +- eta v, y+-) per client (from the uploaded y's, or the uploaded
                 scalars), the two-point estimate, grad f1 on a server minibatch, the step.
  evaluate       (RoundStrategy) test accuracy/loss and f1 of x_{r+1}; the round record.
Client (``client_fit``) -- Algorithm 2 twice per direction, via ``client_solve``.

Choices the paper leaves open (run-config keys, see zofl.config and docs/zohfl.md): y_0 = the
query point; weighting of the client estimates (``weighting``); common random numbers
(``crn``); ``directions`` per client; x_0 (``x0``); uplink of vectors or scalars (``uplink``).
A client not in S_r is not contacted after round 1; it counts as H = 0, adding 0.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import Scalar

from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import (
    STREAM_BATCHES,
    STREAM_SERVER_BATCH,
    SolveSpec,
    client_directions,
    client_solve,
    client_weights,
    f2_values_from_vectors,
    server_step_size,
    server_update,
    zo_estimate,
)
from ..config import Config
from ..tasks import DataSpec, Task
from .base import Reply, RoundStrategy, client_steps


def solve_spec(cfg: Config) -> SolveSpec:
    return SolveSpec(eta=cfg.eta, lam=cfg["lambda"], mu=cfg.mu, lr0=cfg.client_lr, batch_size=cfg.batch_size,
                     radius=cfg.ball_radius, crn=cfg.crn)


class ZOHFL(RoundStrategy):
    """Algorithm 1 of the ZO-HFL paper as a Flower strategy (server side)."""

    name, title = "zohfl", "ZO-HFL"

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        k = self.cfg.directions
        return [(k, n), (k, n)] if self.cfg.uplink == "vectors" else [(2, k)]

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        cfg, n = self.cfg, x.size
        f_values, dirs = {}, {}
        for rep in replies:
            v = client_directions(cfg.seed, r, rep.pid, cfg.directions, n)
            if cfg.uplink == "vectors":
                f_values[rep.pid] = f2_values_from_vectors(x, v, rep.arrays[0], rep.arrays[1], cfg.eta, cfg["lambda"])
            else:
                f_values[rep.pid] = (rep.arrays[0][0], rep.arrays[0][1])
            dirs[rep.pid] = v
        pids = sorted(f_values)
        weights = client_weights(cfg.weighting, pids, self.m, {rep.pid: rep.num_examples for rep in replies},
                                 self.n_train)
        g_f2 = zo_estimate(weights, f_values, dirs, cfg.eta, n)
        grad_f1 = np.zeros(n)
        if len(self.server_data):
            idx = minibatch_indices(seed_sequence(cfg.seed, r, STREAM_SERVER_BATCH), len(self.server_data), 1,
                                    cfg.server_batch_size)[0]
            grad_f1 = self.task.grad(x, self.server_data.x[idx], self.server_data.y[idx])
        gamma_r = server_step_size(cfg.gamma, r)
        f2_est = float(np.mean([(f_values[p][0].mean() + f_values[p][1].mean()) / 2 for p in pids])) \
            if pids else float("nan")
        return server_update(x, grad_f1, g_f2, gamma_r), {"f2_est": f2_est, "gamma_r": gamma_r}


def client_fit(cfg: Config, task: Task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
               config: dict[str, Scalar], state: dict[str, np.ndarray]) -> tuple[list[np.ndarray], int, dict]:
    """Client i's work in round r: Algorithm 2 at x_r +- eta v_j for each of its directions."""
    t0 = time.perf_counter()
    r = int(config["round"])
    data = task.client_data(spec, pid)
    x = parameters[0]
    H = client_steps(pid, config)
    v = client_directions(cfg.seed, r, pid, cfg.directions, x.size)
    grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
    res = client_solve(grad, len(data), x, v, H, solve_spec(cfg), (cfg.seed, r, pid, STREAM_BATCHES))
    out = [res.y_plus, res.y_minus] if cfg.uplink == "vectors" else [np.stack([res.f_plus, res.f_minus])]
    metrics = {"pid": pid, "sampled": True, "H": H, "steps": res.steps, "compute_s": time.perf_counter() - t0}
    return out, len(data), metrics
