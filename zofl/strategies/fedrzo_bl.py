"""FedRZO_bl (paper 001, Algorithm 2) with the lower-level FedAvg oracle (Algorithm 3) on Flower.

A state machine over Flower rounds; every round is one real communication round (``phase_of``):
upper round r = R~_r lower FedAvg rounds at x^_r + v  (-> y_plus), R~_r lower rounds at x^_r
(-> y_base), then one upper round in which the clients take H local zeroth-order steps with those
delayed y's and the server averages their x's. ``num-rounds`` counts upper rounds; the run takes
sum_r (2 R~_r + 1) Flower rounds, and every round record says its ``level`` and ``upper_round``;
the summary counts upper and lower rounds separately. Minimax problems are tasks whose lower
level is h_i = -f_i (``zofl.tasks.bilevel.MinimaxTask``).

Server: draws v_{T_r} (one global direction per upper round, from (seed, r)), runs the oracle,
broadcasts x^_r, v, y_plus, y_base (the clients form x^_r + v), averages. Clients: ``client_fit``
runs Algorithm 3's H~ local SGD steps (phase lower) or Algorithm 2's H local steps (phase upper).

Choices (run-config keys; docs/fedrzo.md): R~_r = ``lower-rounds`` + floor(``lower-rounds-growth``
* r) (the paper: O(r) iterations; its constants kappa_h, mu_h are not given for the experiments);
H~ = ``lower-local-steps``, gamma~ = ``lower-lr`` (constant); the oracle starts from the last
y_base (``lower-warm-start``, else from the task's y_0 every call); with ``crn`` the two calls of a
round draw the same minibatches, so y_plus - y_base reflects the move from x^_r to x^_r + v rather
than sampling noise (which the estimate divides by eta^2, docs/fedrzo.md); upper H = ``local-steps`` (or
the tau schedule); gamma = ``zo-lr``; X_i = the task's X (``upper-set = task``) or FedRZO_nn's
per-client ``local-sets``; the lower rounds use the same client sampling (beta) as any round.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from flwr.common import Scalar

from ..algorithms.fedrzo_bl import (
    LOWER_BASE,
    LOWER_PLUS,
    UPPER,
    average,
    communication_rounds,
    lower_local_sgd,
    phase_of,
    upper_local_steps,
)
from ..algorithms.lower_level import local_steps, minibatch_indices
from ..algorithms.smoothing import seed_sequence, sphere_directions
from ..algorithms.zohfl import STREAM_BATCHES
from ..config import Config
from ..tasks import DataSpec
from .base import Reply, RoundStrategy, client_steps
from .fedrzo_nn import local_set

STREAM_GLOBAL_DIRECTION = 0x61
STREAM_LOWER_CRN = 0x62


def global_direction(seed: int, r: int, n: int, eta: float) -> np.ndarray:
    """v_{T_r}: uniform on the sphere of radius eta, one per upper round (Algorithm 2, line 3)."""
    return eta * sphere_directions(seed_sequence(seed, r, STREAM_GLOBAL_DIRECTION), 1, n)[0]


def upper_projection(cfg: Config, task, pid: int):
    """P_{X_i}: the task's X, or FedRZO_nn's per-client local sets."""
    if cfg.upper_set == "local-sets":
        return local_set(cfg, pid)
    if cfg.upper_set == "none":
        return lambda x: x
    return lambda x: task.project_x(x, cfg)


class FedRZObl(RoundStrategy):
    name, title = "fedrzo-bl", "FedRZO_bl"

    def __init__(self, cfg, task, spec, writer):
        self.n, self.n_y = task.dims(spec)
        self.y0 = np.asarray(task.init_y(spec), dtype=np.float64)
        self.y_hat = self.y0.copy()  # the lower-level FedAvg iterate
        self.y_plus = self.y_base = self.y0.copy()
        self.y_ref = self.y0.copy()  # the latest y_eps(x^_r): what the metrics use
        self.v = np.zeros(self.n)
        self.counts = {"upper": 0, "lower": 0}
        super().__init__(cfg, task, spec, writer)  # last: a resume overwrites the state above

    @classmethod
    def communication_rounds(cls, cfg: Config) -> int:
        return communication_rounds(cfg.num_rounds, cfg.lower_rounds, cfg.lower_rounds_growth)

    def initial_x(self) -> np.ndarray:
        return np.asarray(self.task.init_x(self.spec), dtype=np.float64)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"y_hat": self.y_hat, "y_plus": self.y_plus, "y_base": self.y_base, "y_ref": self.y_ref, "v": self.v,
                "counts": np.array([self.counts["upper"], self.counts["lower"]])}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.y_hat, self.y_plus, self.y_base = state["y_hat"], state["y_plus"], state["y_base"]
        self.y_ref, self.v = state["y_ref"], state["v"]
        self.counts = {"upper": int(state["counts"][0]), "lower": int(state["counts"][1])}

    def round_plan(self, r: int):
        cfg = self.cfg
        ph = phase_of(r, cfg.lower_rounds, cfg.lower_rounds_growth)
        self.phase = ph
        if ph.phase == LOWER_PLUS and ph.j == 0:  # a new upper round: its direction, the oracle's start
            self.v = global_direction(cfg.seed, ph.r, self.n, cfg.eta)
            self.y_hat = (self.y_base if cfg.lower_warm_start else self.y0).copy()
        if ph.phase == LOWER_BASE and ph.j == 0:
            self.y_hat = (self.y_base if cfg.lower_warm_start else self.y0).copy()
        config: dict[str, Scalar] = {"phase": ph.phase, "upper_round": ph.r, "lower_round": ph.j}
        if ph.phase == UPPER:
            H = local_steps(ph.r, cfg.tau, cfg.local_steps)
            return H, config, [self.x, self.v, self.y_plus, self.y_base]
        point = self.x + self.v if ph.phase == LOWER_PLUS else self.x
        return cfg.lower_local_steps, config, [point, self.y_hat]

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        return [(self.n,)] if self.phase.phase == UPPER else [(self.n_y,)]

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        ph = self.phase
        vectors = [rep.arrays[0] for rep in replies]
        if ph.phase == UPPER:
            self.counts["upper"] += 1
            x_new = average(vectors, x)
        else:
            self.counts["lower"] += 1
            self.y_hat = average(vectors, self.y_hat)
            x_new = x
            if ph.j == ph.lower_rounds - 1:  # the oracle call ends
                if ph.phase == LOWER_PLUS:
                    self.y_plus = self.y_hat.copy()
                else:
                    self.y_base = self.y_ref = self.y_hat.copy()
        level = "upper" if ph.phase == UPPER else "lower"
        return x_new, {"record_extra": {"level": level, "phase": ph.phase, "upper_round": ph.r,
                                        "lower_rounds_r": ph.lower_rounds}}

    def metrics(self, x: np.ndarray) -> dict[str, Any]:
        m = self.task.evaluate(self.cfg, self.spec, x, self.y_ref)
        return {**m, "f1": float("nan")}

    def summary_extra(self) -> dict[str, Any]:
        recs = self.writer.records
        return {"upper_rounds": self.counts["upper"], "lower_rounds": self.counts["lower"],
                "communication_rounds": self.counts["upper"] + self.counts["lower"],
                "final_metrics": {k: v for k, v in recs[-1].items() if isinstance(v, float)}}


def client_fit(cfg: Config, task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
               config: dict[str, Scalar], state: dict[str, np.ndarray]):
    t0 = time.perf_counter()
    k = int(config["round"])  # the communication round: seeds this round's minibatches
    H = client_steps(pid, config)
    prob = task.client_problem(cfg, spec, pid)
    if config["phase"] == UPPER:
        x_hat, v, y_plus, y_base = parameters
        batches = minibatch_indices(seed_sequence(cfg.seed, k, pid, STREAM_BATCHES), prob.n_upper, H, cfg.batch_size)
        out = upper_local_steps(prob.f, x_hat, v, y_plus, y_base, batches, cfg.zo_lr, cfg.eta,
                                upper_projection(cfg, task, pid))
    else:
        point, y = parameters
        # crn: lower round j of both oracle calls of upper round r draws the same minibatches
        seed = seed_sequence(cfg.seed, STREAM_LOWER_CRN, int(config["upper_round"]), int(config["lower_round"]), pid) \
            if cfg.crn else seed_sequence(cfg.seed, k, pid, STREAM_BATCHES)
        batches = minibatch_indices(seed, prob.n_lower, H, cfg.batch_size)
        out = lower_local_sgd(prob.lower_grad, point, y, batches, cfg.lower_lr)
    return [out], prob.num_examples, {"pid": pid, "sampled": True, "steps": H,
                                      "compute_s": time.perf_counter() - t0}
