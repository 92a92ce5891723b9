"""Scaffnew (ProxSkip's Algorithm 2, Mishchenko et al. 2022) in the same harness: server and client halves
over ``zofl.algorithms.scaffnew``.

One round r of the harness is one communication of Algorithm 2. The server flips the one shared coin
(``comm-prob`` = p) until heads: K_r ~ Geometric(p) local steps, the same for every client (drawn from
(seed, r), so it needs no state and a resume redraws it), sent as the round's H (the record's ``H``). A
sampled client runs K_r steps x <- x - gamma (grad f_i(x; batch) - h_i) from the server's x_r, one fresh
minibatch per step (seeded by (seed, r, client) as every baseline's), gamma = ``local-lr`` held constant,
and sends x^_i. The server averages them, x_{r+1} = mean_i x^_i, and updates
h_i <- h_i + (p / gamma) (x_{r+1} - x^_i).

Where the control variates live. Algorithm 2's client i keeps h_i (start: 0, so sum_i h_i = 0) and, after a
communication, updates it from the x_{r+1} the server sends back. Here h_i is kept in the client's Flower Context
(``context.state``) with its last x^_i, and the server's next broadcast, x_{r+1}, settles it: a client whose x^_i
of round r was averaged gets x alone in round r+1 and computes h_i <- h_i + (p / gamma)(x_{r+1} - x^_i) itself.
The server also keeps a copy of every h_i (the same update, the same floats: one row per client in its state,
as SCAFFOLD's copy of its c_i), because Algorithm 2 has every client in every communication and this harness
does not always: a client that missed x_{r+1} (not sampled in round r+1 under beta < 1, a straggler, a dropped
reply) or any client after a resume is sent its row (``h_i_server``) instead, and takes it; a checkpoint holds
the copy, so a resume is exact. At beta = 1 without stragglers or faults the downlink is x alone from round 1 on
(half of the server-held variant's bytes), as in the paper. A client told to settle h_i whose Context does not
hold its x^_i of the round before (a restarted SuperNode) refuses the work with a one-line error; the server
counts it failed and sends the row next time.

Choices the paper leaves open (ours, docs/baselines.md): a straggler (H = 0) takes no step and is left out of the
average, its h_i unchanged (nothing was learnt); with beta < 1 or a lost reply the average is over the clients
that replied and only their h_i move (Algorithm 2 has every client in every communication: a warning says so);
the average is uniform, as in the paper's f = (1/n) sum_i f_i, not weighted by example counts; ``aggregation``
other than mean replaces the average by the robust rule.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.scaffnew import coin_steps, communicate, control_update, local_steps
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import STREAM_BATCHES
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..core.sampling import round_size
from ..settings import Config, key
from ..tasks import DataSpec, Task
from .fedavg import ClientLR

HI_SERVER = "h_i_server"  # the server's copy of a client's h_i, sent when the client cannot settle its own


@dataclass(frozen=True)
class ScaffnewParams(ClientLR):
    """Scaffnew: the step gamma (``local-lr``, constant: the h update divides by it) and the coin's p."""

    comm_prob: float = key(0.025, "a number in (0, 1]",
        "Scaffnew's p: the probability of communicating after a local step; local steps per round ~ "
        "Geometric(p), mean 1/p (ours: 1/p = 40, the baselines' K = 2H in round 1 at tau = 20)", "ours",
        lambda v: 0 < v <= 1)


class Scaffnew(Method):
    """State: x, h (m x n: the server's copy of every client's h_i) and averaged_at (the round whose average
    took client i's x^_i last; -1 at the start, where every h_i is 0 and x_0 settles nothing; -2 after a resume,
    where every client is sent its row; not checkpointed)."""

    name, title = "scaffnew", "Scaffnew"
    Params = ScaffnewParams
    local_steps_optional = True  # its local steps come from the coin, not from tau / local-steps

    @classmethod
    def config_warnings(cls, cfg) -> list[str]:
        out = []  # (Scaffnew runs on the round engines only: the check refuses engine = 'async')
        if cfg.straggler_prob == 1:
            out.append("run-config key 'straggler-prob' = 1: every sampled client is a straggler in every round, "
                       "so no Scaffnew client ever takes a step; use a value below 1")
        if round_size(cfg.beta, cfg.num_clients) < cfg.num_clients:
            out.append("strategy 'scaffnew' with beta < 1: ProxSkip's Algorithm 2 has every client in every "
                       "communication; here the sampled clients' x^_i are averaged and only their h_i move "
                       "(ours, docs/baselines.md)")
        return out

    def init(self) -> State:
        state = super().init()
        return {**state, "h": np.zeros((self.m, state["x"].size)), "averaged_at": np.full(self.m, -1)}

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> State:
        return {**arrays, "averaged_at": np.full(self.m, -2)}  # a restarted run's clients may have lost h_i

    def state_dict(self, state: State) -> dict[str, np.ndarray]:
        return {k: v for k, v in state.items() if k != "averaged_at"}

    def round_H(self, state: State, r: int) -> int:
        """K_r: the shared coin's flips until heads (zofl.algorithms.scaffnew.coin_steps), from (seed, r)."""
        return coin_steps(np.random.default_rng(seed_sequence(self.cfg.seed, r, streams.SCAFFNEW_COIN)),
                          self.hp.comm_prob)

    def downlink(self, state: State, r: int, pid: int) -> dict[str, np.ndarray]:
        """x; and the server's copy of h_i unless the client can settle its own from this x (its x^_i was
        averaged into it in round r - 1)."""
        if state["averaged_at"][pid] == r - 1:
            return {"x": state["x"]}
        return {"x": state["x"], HI_SERVER: state["h"][pid]}

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return {"x": state["x"].shape}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        steps = {w.pid: w.H for w in plan.works}
        used = [rep for rep in replies if steps[rep.pid] > 0]  # a straggler took no step (replies: sampled clients')
        if not used:
            return state, {}
        x_hats = [rep.arrays["x"] for rep in used]
        x_new = communicate(x_hats) if self.robust is None else self.robust(x_hats)
        h, averaged_at = state["h"].copy(), state["averaged_at"].copy()
        for rep in used:
            h[rep.pid] = control_update(h[rep.pid], x_new, rep.arrays["x"], self.hp.comm_prob, self.hp.local_lr)
            averaged_at[rep.pid] = plan.r
        return {**state, "x": x_new, "h": h, "averaged_at": averaged_at}, {}


def client_control(hp: ScaffnewParams, work: Work, state: dict[str, np.ndarray]) -> np.ndarray:
    """h_i for this round: the server's copy when sent, else the client's own, settled by the x just received
    (its x^_i of round r - 1 was averaged into it): h_i + (p / gamma)(x - x^_i)."""
    if HI_SERVER in work.arrays:
        return work.arrays[HI_SERVER].copy()
    if work.round == 0 and "x_hat" not in state:  # Algorithm 2's start
        return np.zeros_like(work.arrays["x"])
    if "x_hat" not in state or int(state["x_hat_round"][0]) != work.round - 1:
        raise ValueError(f"Scaffnew: the server expects this client to settle its h_i from its x^_i of round "
                         f"{work.round - 1}, which its Context does not hold (a restarted node?); the server will "
                         f"send its copy next time")
    return control_update(state["h_i"], work.arrays["x"], state["x_hat"], hp.comm_prob, hp.local_lr)


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    t0 = time.perf_counter()
    hp = ScaffnewParams.of(cfg)
    h_i = client_control(hp, work, state)
    data = task.client_data(spec, work.pid)
    batches = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES), len(data), work.H,
                                cfg.batch_size)
    grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
    x_hat = local_steps(grad, work.arrays["x"], h_i, batches, hp.local_lr)
    state.update(h_i=h_i, x_hat=x_hat, x_hat_round=np.array([work.round]))  # settled by the next x, if averaged
    return Reply(work.pid, {"x": x_hat}, len(data), {"steps": work.H, "compute_s": time.perf_counter() - t0})
