"""afbo-global (ours, beyond paper 002): asynchronous federated bilevel optimization without AFBO's bias.

AFBO's server averages every client's *own* hyper-gradient estimate d_i - J_i H_i^{-1} grad_y f_i;
when the clients' Jacobians (or Hessians) differ that mean is not the hyper-gradient, and AFBO's fixed
point is not x* (tests/test_afbo.py). Here, as in FedNest's global FedIHGP, the inverse-Hessian-vector
product is one *shared* vector v on the server, and every client's contribution is linear in it; the
mathematics, with the fixed-point argument, is in ``zofl.algorithms.afbo_global``.

The server alternates, each step one version of the asynchronous engine (``zofl.core.asynchronous``),
taken as soon as ``buffer-size`` replies of the current kind are in (the server never waits for a
fixed set of clients; any client may sit a task out, ``availability``, or be slow, ``speed-profile``):

* K^t = ``inner-rounds`` inner steps (as AFBO): a client runs E_i local SGD steps on grad_y g_i(x, .)
  from y and sends the aligned update G_i; the server steps y <- y - beta mean_i G_i (``inner-lr``).
* N = ``neumann-steps`` (its first entry, as FedNest) Neumann steps: a client sends its residual
  r_i = grad^2_yy g_i v - grad_y f_i on the (x, y, v) it received; the server steps
  v <- v - (1/l) mean_i r_i (l = ``lipschitz-g``). v is kept across outer rounds (warm start: the
  running iterate of H^{-1} b, not restarted from 0 as FedNest's series is).
* one outer step: a client sends q_i = grad_x f_i - grad^2_xy g_i v; the server steps
  x <- x - eta mean_i q_i (``outer-lr``).

Every mean is over the newest stored value of every client (``stored-average``, as AFBO), stale ones
included; a reply of another kind than the current step's is stored when it arrives and used by the
next step of its kind. The state keeps, for each kind, every client's newest value and the server
step of the model it was computed on, so each record has the mean age of the values in use. Every
task carries x, y and v (the engine's resume check wants one set of arrays for every task).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.afbo import aligned_local_sgd, stored_mean
from ..algorithms.afbo_global import (
    client_hyper_piece,
    client_residual,
    delay_mean,
    inner_step,
    neumann_step,
    outer_step,
)
from ..algorithms.lower_level import local_steps, minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..core.method import ASYNC, HYPERGRAD, Method, State
from ..core.protocol import Reply, Work
from ..core.sampling import client_local_steps, per_client
from ..settings import Config, LowerSGD, NeumannSeries, OuterStep, ServerInner, TaskSettings
from ..tasks import DataSpec
from .afbo import StoredUpdates

STREAM_BATCHES = streams.BATCHES
INNER, NEUMANN, OUTER = "inner", "neumann", "outer"
PHASES = (INNER, NEUMANN, OUTER)
KIND = {INNER: "G", NEUMANN: "r", OUTER: "q"}  # the reply array of each kind of task
STATE_KEYS = ("x", "y", "v", "G", "G_have", "G_ver", "r", "r_have", "r_ver", "q", "q_have", "q_ver", "counters")


@dataclass(frozen=True)
class AFBOGlobalParams(LowerSGD, OuterStep, ServerInner, NeumannSeries, StoredUpdates):
    """afbo-global: AFBO's keys but for its random-depth APHE and outer-delay bound."""


class AFBOGlobal(Method):
    """State: x, y, the shared v; for each kind of reply (G: inner, r: Neumann residual, q: hyper-gradient
    piece) every client's newest value (m rows), whether it was ever sent (``*_have``) and the server step
    of the model it was computed on (``*_ver``); counters [t, k, phase, step] (phase 0 inner, 1 Neumann,
    2 outer; k the step within the phase; step the number of server steps so far)."""

    name, title = "afbo-global", "AFBO-global (ours)"
    kind, needs, default_task = ASYNC, HYPERGRAD, "hyper-cleaning"
    Params = AFBOGlobalParams
    one_task_per_version = True  # a client sends one update per server step and waits for the next (as AFBO)

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        self.p, self.q = task.dims(self.task_cfg, spec)
        self.N = int(float(self.hp.neumann_steps.split(",")[0]))

    def init(self) -> State:
        m, p, q = self.m, self.p, self.q
        s = {"x": np.asarray(self.task.init_x(self.task_cfg, self.spec), dtype=np.float64),
             "y": np.asarray(self.task.init_y(self.task_cfg, self.spec), dtype=np.float64), "v": np.zeros(q)}
        for key, n in (("G", q), ("r", q), ("q", p)):
            s.update({key: np.zeros((m, n)), f"{key}_have": np.zeros(m, bool), f"{key}_ver": np.zeros(m, np.int64)})
        s["counters"] = np.zeros(4, np.int64)
        return s

    # -- checkpoint: the state is all arrays; copies, so that a checkpoint never aliases the running state
    def state_dict(self, state: State) -> dict[str, np.ndarray]:
        return {k: np.array(state[k], copy=True) for k in STATE_KEYS}

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> State:
        missing = [k for k in STATE_KEYS if k not in arrays]
        if missing:
            raise ValueError(f"afbo-global checkpoint lacks {missing}")
        return {k: np.array(arrays[k], copy=True) for k in STATE_KEYS}

    # -- the schedule ------------------------------------------------------------------------
    @staticmethod
    def phase(state: State) -> str:
        return PHASES[int(state["counters"][2])]

    def counts(self, state: State, reply: Reply) -> bool:
        """A reply of the current step's kind (G inner, r Neumann, q outer)."""
        return KIND[self.phase(state)] in reply.arrays

    def ready(self, state: State, replies: list[Reply]) -> bool:
        """Step when ``buffer-size`` replies of the current kind are in (others are stored and wait)."""
        return sum(self.counts(state, rep) for rep in replies) >= self.cfg.buffer_size

    def period(self) -> int:
        """Server steps per outer round: K^t inner + N Neumann + 1 outer."""
        return self.hp.inner_rounds + self.N + 1

    def task_kind(self, state: State, pid: int) -> str:
        """The current phase's kind, unless client pid's newest value of another kind was computed more
        than one outer round (``period`` server steps) ago, or never: then the oldest such kind (ours: it
        bounds every stored value's age by the asynchrony; without it a slow client whose tasks keep
        falling in one phase never refreshes, or never sends, the others)."""
        step, ph = int(state["counters"][3]), self.phase(state)
        ages = {kind: step - int(state[f"{KIND[kind]}_ver"][pid]) for kind in PHASES if kind != ph}
        late = {kind: age for kind, age in ages.items() if age > self.period()}
        return max(late, key=late.get) if late else ph

    def plan_task(self, state: State, version: int, task: int, pid: int) -> Work:
        t, k, _, _ = (int(c) for c in state["counters"])
        ph = self.task_kind(state, pid)
        arrays = {"x": state["x"], "y": state["y"], "v": state["v"]}
        if ph == INNER:
            E = client_local_steps(local_steps(t, self.cfg.tau, self.cfg.local_steps),
                                   per_client(self.cfg.local_work, pid))
            return Work(pid, task, E, arrays, {"phase": INNER, "t": t, "k": k})
        return Work(pid, task, 1, arrays, {"phase": ph, "t": t, "k": k})

    def task_steps(self, work: Work) -> int:
        """Cost on the simulated clock: E_i gradient steps; a Neumann or outer task two oracle calls
        (a product and a gradient)."""
        return work.H if work.config["phase"] == INNER else 2

    def task_reply_shapes(self, state: State, work: Work) -> dict[str, tuple[int, ...]]:
        return {KIND[work.config["phase"]]: (self.p if work.config["phase"] == OUTER else self.q,)}

    # -- the server ----------------------------------------------------------------------------
    def receive(self, state: State, reply: Reply, staleness: int) -> State:
        """Store the reply as client pid's newest value of its kind, with the step it was computed on."""
        key = next(k for k in ("G", "r", "q") if k in reply.arrays)
        ver = int(state["counters"][3]) - int(staleness)
        pid = reply.pid
        if state[f"{key}_have"][pid] and state[f"{key}_ver"][pid] > ver:
            return state  # an older value than the one stored (cannot happen with one task per client)
        s = dict(state)
        s[key], s[f"{key}_have"], s[f"{key}_ver"] = s[key].copy(), s[f"{key}_have"].copy(), s[f"{key}_ver"].copy()
        s[key][pid], s[f"{key}_have"][pid], s[f"{key}_ver"][pid] = reply.arrays[key], True, ver
        return s

    def _mean(self, s: State, key: str) -> np.ndarray:
        return stored_mean(s[key], s[f"{key}_have"], self.hp.stored_average, self.robust)

    def update_async(self, state: State, version: int, replies: list[Reply],
                     staleness: list[int]) -> tuple[State, dict[str, Any]]:
        """One server step of the current kind, (Y), (N) or (X), with the stored values of all m clients."""
        s = dict(state)
        t, k, ph, step = (int(c) for c in s["counters"])
        kind = PHASES[ph]
        ages = {f"{name}_age_mean": delay_mean(step, s[f"{key}_ver"], s[f"{key}_have"])
                for name, key in (("inner", "G"), ("neumann", "r"), ("outer", "q"))}
        fields: dict[str, Any] = {"step": kind, **ages}
        if kind == INNER:
            s["y"] = inner_step(s["y"], self._mean(s, "G"), self.hp.inner_lr)
            k += 1
            if k >= self.hp.inner_rounds:
                k, ph = 0, 1
        elif kind == NEUMANN:
            mean_r = self._mean(s, "r")
            s["v"] = neumann_step(s["v"], mean_r, self.hp.lipschitz_g)
            fields["residual_norm"] = float(np.linalg.norm(mean_r))
            k += 1
            if k >= self.N:
                k, ph = 0, 2
        else:
            s["x"] = outer_step(s["x"], self._mean(s, "q"), self.hp.outer_lr)
            t, k, ph = t + 1, 0, 0
        s["counters"] = np.array([t, k, ph, step + 1], dtype=np.int64)
        return s, {**fields, "outer_round": t}

    def metrics(self, state: State) -> dict[str, Any]:
        return {**self.task.evaluate(self.task_cfg, self.spec, state["x"], state["y"]), "f1": float("nan")}


def client_work(cfg: Config, task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    """Client i's task: G_i (inner, as AFBO), r_i (Neumann, eq. R) or q_i (outer, eq. Q) on the (x, y, v)
    it received, one minibatch of its upper and one of its lower examples for the products."""
    hp = AFBOGlobalParams.of(cfg)
    t0 = time.perf_counter()
    o = task.client_oracles(TaskSettings.of(cfg), spec, work.pid)
    x, y, v = work.arrays["x"], work.arrays["y"], work.arrays["v"]
    ph = work.config["phase"]
    if ph == INNER:
        batches = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES), o.n_lower,
                                    work.H, cfg.batch_size)
        G, _ = aligned_local_sgd(lambda yy, idx: o.grad_y_g(x, yy, idx), y, batches, hp.lower_lr)
        return Reply(work.pid, {"G": G}, o.num_examples, {"steps": work.H, "compute_s": time.perf_counter() - t0})
    up = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES, 0), o.n_upper, 1,
                           cfg.batch_size)[0]
    lo = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES, 1), o.n_lower, 1,
                           cfg.batch_size)[0]
    if ph == NEUMANN:
        out = {"r": client_residual(lambda vv: o.hvp_yy_g(x, y, vv, lo), o.grad_y_f(x, y, up), v)}
    else:
        out = {"q": client_hyper_piece(o.grad_x_f(x, y, up), lambda vv: o.jvp_xy_g(x, y, vv, lo), v)}
    return Reply(work.pid, out, o.num_examples, {"steps": 2, "t": int(work.config["t"]),
                                                 "compute_s": time.perf_counter() - t0})
