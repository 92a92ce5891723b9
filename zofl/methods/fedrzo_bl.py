"""FedRZO_bl (paper 001, Algorithm 2) with the lower-level FedAvg oracle (Algorithm 3).

A state machine over communication rounds; every round is one real Flower round (``phase_of``):
upper round r = R~_r lower FedAvg rounds at x^_r + v  (-> y_plus), R~_r lower rounds at x^_r
(-> y_base), then one upper round in which the clients take H local zeroth-order steps with those
delayed y's and the server averages their x's. ``num-rounds`` counts upper rounds; the run takes
sum_r (2 R~_r + 1) communication rounds, and every round record says its ``level`` and ``upper_round``;
the summary counts upper and lower rounds separately. Minimax problems are tasks whose lower
level is h_i = -f_i (``zofl.tasks.bilevel.MinimaxTask``).

Server: draws v_{T_r} (one global direction per upper round, from (seed, r)), runs the oracle,
sends x^_r, v, y_plus, y_base (the clients form x^_r + v), averages. Clients: ``client_work``
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.fedrzo_bl import (
    LOWER_PLUS,
    UPPER,
    Phase,
    average,
    communication_rounds,
    lower_local_sgd,
    phase_of,
    upper_local_steps,
)
from ..algorithms.lower_level import local_steps, minibatch_indices
from ..algorithms.smoothing import seed_sequence, sphere_directions
from ..algorithms.zohfl import STREAM_BATCHES
from ..core.method import BILEVEL, Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..core.record import last_evaluated
from ..settings import CommonRandom, Config, LowerSGD, Smoothing, TaskSettings, choice, key, nonnegative
from ..tasks import DataSpec
from .fedrzo_nn import ZOLocal, local_set

STREAM_GLOBAL_DIRECTION = streams.GLOBAL_DIRECTION
STREAM_LOWER_CRN = streams.LOWER_CRN


def global_direction(seed: int, r: int, n: int, eta: float) -> np.ndarray:
    """v_{T_r}: uniform on the sphere of radius eta, one per upper round (Algorithm 2, line 3)."""
    return eta * sphere_directions(seed_sequence(seed, r, STREAM_GLOBAL_DIRECTION), 1, n)[0]


def upper_projection(cfg: Config, task, pid: int):
    """P_{X_i}: the task's X, or FedRZO_nn's per-client local sets."""
    hp = FedRZOblParams.of(cfg)
    if hp.upper_set == "local-sets":
        return local_set(cfg, pid)
    if hp.upper_set == "none":
        return lambda x: x
    return lambda x: task.project_x(x, TaskSettings.of(cfg))


@dataclass(frozen=True)
class FedRZOblParams(Smoothing, CommonRandom, ZOLocal, LowerSGD):
    """FedRZO_bl (paper 001, Algorithms 2 and 3)."""

    lower_rounds: int = key(2, "an integer >= 1",
        "R~_0: lower-level FedAvg rounds per oracle call in upper round 0", "ours", lambda v: v >= 1)
    lower_rounds_growth: float = key(0.1, "a number >= 0",
        "R~_r = lower-rounds + floor(growth * r): the oracle runs longer as r grows (paper: O(r))", "ours", nonnegative)
    lower_local_steps: int = key(10, "an integer >= 1",
        "H~: local SGD steps per lower-level round", "ours", lambda v: v >= 1)
    lower_warm_start: bool = key(True, "true or false",
        "each oracle call starts from the last y_eps(x_r) (else from the task's y_0)", "ours")
    upper_set: str = key("task", "'task', 'local-sets' or 'none'",
        "FedRZO_bl's X_i: the task's set (hyper-logistic: x >= x-min), the local-sets, or R^n",
        "ours", choice("task", "local-sets", "none"))


class FedRZObl(Method):
    """State: x (x^_r), y_hat (the lower-level FedAvg iterate), y_plus / y_base (the oracle's last
    answers at x^_r + v and x^_r), y_ref (the latest y_eps(x^_r): what the metrics use), v (this
    upper round's direction) and counts = [upper, lower] rounds done."""

    name, title = "fedrzo-bl", "FedRZO_bl"
    needs, default_task = BILEVEL, "hyper-logistic"
    phased = True
    local_steps_optional = True  # H = 0 is a setting of its Fig. 2 (the lower-level rounds still run)
    Params = FedRZOblParams

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        self.n, self.n_y = task.dims(spec)
        self.y0 = np.asarray(task.init_y(self.task_cfg, spec), dtype=np.float64)

    def init(self) -> State:
        y0 = self.y0
        return {"x": np.asarray(self.task.init_x(self.task_cfg, self.spec), dtype=np.float64), "y_hat": y0.copy(),
                "y_plus": y0.copy(), "y_base": y0.copy(), "y_ref": y0.copy(), "v": np.zeros(self.n),
                "counts": np.array([0, 0])}

    def communication_rounds(self) -> int:
        return communication_rounds(self.cfg.num_rounds, self.hp.lower_rounds, self.hp.lower_rounds_growth)

    def phase(self, r: int) -> Phase:
        return phase_of(r, self.hp.lower_rounds, self.hp.lower_rounds_growth)

    def begin(self, state: State, r: int) -> State:
        """The state at the start of round r: a new upper round draws its direction, and each oracle
        call starts from the last y_base (``lower-warm-start``) or from y_0."""
        ph, cfg = self.phase(r), self.cfg
        if ph.j != 0 or ph.phase == UPPER:
            return state
        state = dict(state)
        if ph.phase == LOWER_PLUS:
            state["v"] = global_direction(cfg.seed, ph.r, self.n, self.hp.eta)
        state["y_hat"] = (state["y_base"] if self.hp.lower_warm_start else self.y0).copy()
        return state

    def round_H(self, state: State, r: int) -> int:
        ph = self.phase(r)
        return local_steps(ph.r, self.cfg.tau, self.cfg.local_steps) if ph.phase == UPPER \
            else self.hp.lower_local_steps

    def round_config(self, state: State, r: int) -> dict[str, Any]:
        ph = self.phase(r)
        return {"phase": ph.phase, "upper_round": ph.r, "lower_round": ph.j}

    def downlink(self, state: State, r: int, pid: int) -> dict[str, np.ndarray]:
        state = self.begin(state, r)
        ph = self.phase(r)
        if ph.phase == UPPER:
            return {"x": state["x"], "v": state["v"], "y_plus": state["y_plus"], "y_base": state["y_base"]}
        point = state["x"] + state["v"] if ph.phase == LOWER_PLUS else state["x"]
        return {"point": point, "y": state["y_hat"]}

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": (self.n,)} if self.phase(r).phase == UPPER else {"y": (self.n_y,)}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        r = plan.r
        ph = self.phase(r)
        state = dict(self.begin(state, r))
        counts = state["counts"].copy()
        if ph.phase == UPPER:
            counts[0] += 1
            state["x"] = average([rep.arrays["x"] for rep in replies], state["x"], self.robust)
        else:
            counts[1] += 1
            state["y_hat"] = average([rep.arrays["y"] for rep in replies], state["y_hat"], self.robust)
            if ph.j == ph.lower_rounds - 1:  # the oracle call ends
                if ph.phase == LOWER_PLUS:
                    state["y_plus"] = state["y_hat"].copy()
                else:
                    state["y_base"] = state["y_hat"].copy()
                    state["y_ref"] = state["y_hat"].copy()
        state["counts"] = counts
        level = "upper" if ph.phase == UPPER else "lower"
        return state, {"level": level, "phase": ph.phase, "upper_round": ph.r, "lower_rounds_r": ph.lower_rounds}

    def metrics(self, state: State) -> dict[str, Any]:
        m = self.task.evaluate(self.task_cfg, self.spec, state["x"], state["y_ref"])
        return {**m, "f1": float("nan")}

    def summary_extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        upper = sum(r.get("level") == "upper" for r in records)
        lower = sum(r.get("level") == "lower" for r in records)
        return {"upper_rounds": upper, "lower_rounds": lower, "communication_rounds": upper + lower,
                "final_metrics": {k: v for k, v in last_evaluated(records).items() if isinstance(v, float)}}


def client_work(cfg: Config, task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    hp = FedRZOblParams.of(cfg)
    t0 = time.perf_counter()
    k, pid, H = work.round, work.pid, work.H  # k, the communication round, seeds this round's minibatches
    prob = task.client_problem(TaskSettings.of(cfg), spec, pid)
    a = work.arrays
    if work.config["phase"] == UPPER:
        batches = minibatch_indices(seed_sequence(cfg.seed, k, pid, STREAM_BATCHES), prob.n_upper, H, cfg.batch_size)
        out = {"x": upper_local_steps(prob.f, a["x"], a["v"], a["y_plus"], a["y_base"], batches, hp.zo_lr, hp.eta,
                                      upper_projection(cfg, task, pid))}
    else:
        # crn: lower round j of both oracle calls of upper round r draws the same minibatches
        seed = seed_sequence(cfg.seed, STREAM_LOWER_CRN, int(work.config["upper_round"]),
                             int(work.config["lower_round"]), pid) if hp.crn \
            else seed_sequence(cfg.seed, k, pid, STREAM_BATCHES)
        batches = minibatch_indices(seed, prob.n_lower, H, cfg.batch_size)
        out = {"y": lower_local_sgd(prob.lower_grad, a["point"], a["y"], batches, hp.lower_lr)}
    return Reply(pid, out, prob.num_examples, {"steps": H, "compute_s": time.perf_counter() - t0})
