"""AFBO (paper 002, Algorithms 1 and 2): anarchic federated bilevel optimization, asynchronous.

The server alternates K^t = ``inner-rounds`` inner steps on y with one outer step on x; each step
is one version of the asynchronous engine (``zofl.core.asynchronous``), taken as soon as
``buffer-size`` replies of the current kind are in (the server never waits for a fixed set of
clients). Any client may take part in any round or not (``availability``), with any number of
local steps (``local-work``) and its own Neumann depth N_i (``neumann-steps``):

* inner task (Algorithm 1, lines 5-8): on (x^t, y^{t,k}), E_i local SGD steps on grad_y g_i with
  step ``lower-lr``; the client sends the aligned update G_i = mean of its E_i gradients.
* inner step (lines 9-10): the server stores the newest G_i of every client and sets
  y <- y - beta (1/m) sum_i G_i, stale ones included (beta = ``inner-lr``); rho_i = the inner steps
  taken since the y client i's stored G_i was computed on (0: computed on the y this step moves).
* outer task (line 12): H_i = APHE(x^t, y^{t+1}) (``zofl.algorithms.afbo.aphe``, ``aphe`` mode,
  ``lipschitz-g`` = l_{g,1}).
* outer step (lines 14-15): the server stores the newest H_i and sets x <- x - eta (1/m) sum_i H_i
  (eta = ``outer-lr``); tau_i = the outer steps taken since the x its stored H_i was computed on.

A reply is applied as it arrives, whatever round it was computed for: a late G_i (one computed for
an earlier y, or arriving in the outer phase) is stored and used by the next inner step with its
delay (the paper's G_i^{t,k - rho_i}: the delay counts from the y it was computed on, not from its
arrival). Each step's record says what it used (``update_async``: ``used``, ``held``, ``rho``,
``tau``). Inner steps are counted through the outer rounds (y^{t+1,0} = y^{t,K}), so a G_i computed
in outer round t and used in round t+1 has the inner steps between as its delay. Choices (ours, keys): the mean over the
clients heard from until every client has sent once (``stored-average``); E_i = ``local-steps``
(or the tau schedule at the outer round t) times the client's ``local-work``; one "round" of the
paper's counters rho_i / tau_i is one server step of that kind; a client sends one update per
server step (it waits for the next one after it has replied). Optionally (``max-outer-delay`` =
tau_M > 0, Assumption 6's bound made true by the schedule) a client whose newest H_i is more than
tau_M outer rounds old is given an outer task (on the newest x, y) before more inner work; off by
default, as it did not help on the quadratic test problem (docs/afbo.md).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.afbo import aligned_local_sgd, aphe, stored_mean
from ..algorithms.lower_level import local_steps, minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..core.method import ASYNC, HYPERGRAD, Method, State
from ..core.protocol import Reply, Work
from ..core.sampling import client_local_steps, per_client
from ..settings import Config, LowerSGD, NeumannSeries, OuterStep, ServerInner, Settings, TaskSettings, choice, key
from ..tasks import DataSpec

STREAM_BATCHES = streams.BATCHES
STREAM_APHE = streams.APHE
INNER, OUTER = "inner", "outer"


def neumann_depth(cfg: Config, pid: int) -> int:
    """N_i: client i's entry of ``neumann-steps``."""
    hp = AFBOParams.of(cfg)
    return int(per_client(hp.neumann_steps, pid))


def aphe_batches(seed: int, task: int, pid: int, n_upper: int, n_lower: int, N_i: int, batch: int) -> list:
    """The minibatches of one APHE call: d (upper), W (lower), grad_y f (upper), N_i Hessians (lower)."""
    up = minibatch_indices(seed_sequence(seed, task, pid, STREAM_BATCHES, 0), n_upper, 2, batch)
    lo = minibatch_indices(seed_sequence(seed, task, pid, STREAM_BATCHES, 1), n_lower, 1 + N_i, batch)
    return [up[0], lo[0], up[1], *lo[1:]]


@dataclass(frozen=True)
class StoredUpdates(Settings):
    """How AFBO's server averages the stored client updates (AFBO, afbo-global)."""

    stored_average: str = key("stored", "'stored' or 'all'",
        "AFBO: average the stored updates over the clients heard from, or over all m (never heard = 0)",
        "ours", choice("stored", "all"))


@dataclass(frozen=True)
class AFBOParams(LowerSGD, OuterStep, ServerInner, NeumannSeries, StoredUpdates):
    """AFBO (paper 002)."""

    aphe: str = key("random-depth", "'random-depth', 'sum' or 'printed'",
        "APHE's reading of Algorithm 2 (zofl.algorithms.afbo.aphe): random depth (the cited estimator), "
        "the truncated sum, or the fixed-depth product as printed", "ours", choice("random-depth", "sum", "printed"))
    max_outer_delay: int = key(0, "an integer >= 0 (0 = no bound)",
        "AFBO's tau_M (Assumption 6): a client whose newest H_i is more than this many outer rounds old "
        "computes a new one before more inner work", "ours", lambda v: v >= 0)


class AFBO(Method):
    """State: x, y, the stored G (m, q) and H (m, p) with which rows were ever sent, which arrived
    since the last step of their kind (fresh_G, fresh_H), the model version (server steps before its
    task was sent) every stored G_i / H_i was computed on (G_version, H_version; -1: none yet), the
    delays rho and tau of the last step of their kind, the outer round of every client's newest H
    (H_round), and the counters [t, k, phase] (phase 0 = inner, 1 = outer). Version v is inner step
    number inner_index(v) of outer round v // (K + 1) (K = ``inner-rounds``: K inner steps and one
    outer step per outer round)."""

    name, title = "afbo", "AFBO"
    kind, needs, default_task = ASYNC, HYPERGRAD, "hyper-cleaning"
    Params = AFBOParams
    one_task_per_version = True  # a client sends one update per round (Algorithm 1); it waits for the next

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        self.p, self.q = task.dims(self.task_cfg, spec)
        self.N = max(int(float(v)) for v in self.hp.neumann_steps.split(","))

    def init(self) -> State:
        m, p, q = self.m, self.p, self.q
        return {"x": np.asarray(self.task.init_x(self.task_cfg, self.spec), dtype=np.float64),
                "y": np.asarray(self.task.init_y(self.task_cfg, self.spec), dtype=np.float64),
                "G": np.zeros((m, q)), "G_have": np.zeros(m, bool), "H": np.zeros((m, p)),
                "H_have": np.zeros(m, bool), "rho": np.zeros(m, np.int64), "tau": np.zeros(m, np.int64),
                "H_round": np.full(m, -1, np.int64), "fresh_G": np.zeros(m, bool), "fresh_H": np.zeros(m, bool),
                "G_version": np.full(m, -1, np.int64), "H_version": np.full(m, -1, np.int64),
                "counters": np.array([0, 0, 0])}

    # -- versions and the two kinds of steps ---------------------------------------------------
    def version_of(self, state: State) -> int:
        """The model version (server steps taken) at ``state``: t (K + 1) + k."""
        t, k, _ = (int(v) for v in state["counters"])
        return t * (self.hp.inner_rounds + 1) + k

    def inner_index(self, v: np.ndarray | int) -> np.ndarray:
        """Inner steps taken before version v (counted through the outer rounds); -1 for v = -1 (none)."""
        v = np.asarray(v, np.int64)
        K = self.hp.inner_rounds
        return np.where(v < 0, -1, (v // (K + 1)) * K + np.minimum(v % (K + 1), K))

    def outer_index(self, v: np.ndarray | int) -> np.ndarray:
        """Outer steps taken before version v (the outer round t); -1 for v = -1 (none)."""
        v = np.asarray(v, np.int64)
        return np.where(v < 0, -1, v // (self.hp.inner_rounds + 1))

    @staticmethod
    def phase(state: State) -> str:
        return OUTER if state["counters"][2] else INNER

    def counts(self, state: State, reply: Reply) -> bool:
        """A reply of the current step's kind (G in the inner phase, H in the outer)."""
        return ("H" if self.phase(state) == OUTER else "G") in reply.arrays

    def ready(self, state: State, replies: list[Reply]) -> bool:
        """Step when ``buffer-size`` replies of the current kind are in (late ones of the other kind wait)."""
        return sum(self.counts(state, rep) for rep in replies) >= self.cfg.buffer_size

    def plan_task(self, state: State, version: int, task: int, pid: int) -> Work:
        t, k, _ = (int(v) for v in state["counters"])
        arrays = {"x": state["x"], "y": state["y"]}
        catch_up = self.hp.max_outer_delay and t - int(state["H_round"][pid]) > self.hp.max_outer_delay
        if self.phase(state) == INNER and not catch_up:
            H = local_steps(t, self.cfg.tau, self.cfg.local_steps)
            E = client_local_steps(H, per_client(self.cfg.local_work, pid))
            return Work(pid, task, E, arrays, {"phase": INNER, "t": t, "k": k})
        return Work(pid, task, neumann_depth(self.cfg, pid), arrays, {"phase": OUTER, "t": t, "N": self.N})

    def task_steps(self, work: Work) -> int:
        """Cost on the simulated clock: E_i gradient steps, or N_i Hessian products plus 3 more."""
        return work.H if work.config["phase"] == INNER else work.H + 3

    def task_reply_shapes(self, state: State, work: Work) -> dict[str, tuple[int, ...]]:
        return {"G": (self.q,)} if work.config["phase"] == INNER else {"H": (self.p,)}

    def receive(self, state: State, reply: Reply, staleness: int) -> State:
        """Store the newest update of the client as soon as it arrives (lines 9 and 14), with the version
        it was computed on (``staleness`` versions before the current one)."""
        s = dict(state)
        computed_on = self.version_of(state) - int(staleness)
        if "G" in reply.arrays:
            s["G"], s["G_have"], s["fresh_G"] = s["G"].copy(), s["G_have"].copy(), s["fresh_G"].copy()
            s["G_version"] = s["G_version"].copy()
            s["G"][reply.pid], s["G_have"][reply.pid], s["fresh_G"][reply.pid] = reply.arrays["G"], True, True
            s["G_version"][reply.pid] = computed_on
        else:
            s["H"], s["H_have"], s["fresh_H"] = s["H"].copy(), s["H_have"].copy(), s["fresh_H"].copy()
            s["H_round"], s["H_version"] = s["H_round"].copy(), s["H_version"].copy()
            s["H"][reply.pid], s["H_have"][reply.pid], s["fresh_H"][reply.pid] = reply.arrays["H"], True, True
            s["H_round"][reply.pid] = max(int(s["H_round"][reply.pid]), int(reply.metrics.get("t", -1)))
            s["H_version"][reply.pid] = computed_on
        return s

    def update_async(self, state: State, version: int, replies: list[Reply],
                     staleness: list[int]) -> tuple[State, dict[str, Any]]:
        """One server step with the stored updates of all m clients (stale ones included).

        The record's fields (besides the engine's, ``zofl.core.asynchronous``):

        * ``step``: "inner" (y) or "outer" (x); ``outer_round``: t after the step.
        * ``used``: the updates this step takes in: those of its kind that arrived since the last step of
          its kind (the newest per client), each {client, kind ("inner": G_i, "outer": H_i), version (the
          model version its task was sent on), delay (rho_i for G_i in inner steps, tau_i for H_i in
          outer steps: the steps of its kind between the model it was computed on and this step)},
          by client id. The mean also holds every other client's older stored update (``rho``/``tau``).
        * ``held``: replies of the other kind that arrived since the previous step: stored, and taken in
          (listed in ``used``) by the next step of their kind: {client, kind, version}, in arrival order.
        * ``rho``, ``tau``: per client (index = client id), the delay of its stored G_i / H_i at the last
          step of that kind (this one for its own kind); a client not heard from yet counts from -1
          (the steps of that kind so far, plus 1). ``inner_delay_mean`` / ``outer_delay_mean``: their means."""
        s = dict(state)
        t, k, ph = (int(v) for v in s["counters"])
        now = self.version_of(state)
        held = [{"client": int(rep.pid), "kind": OUTER if "H" in rep.arrays else INNER,
                 "version": int(now - st)} for rep, st in zip(replies, staleness)
                if ("H" in rep.arrays) != bool(ph)]
        if ph == 0:  # inner step (lines 9-10): G_i computed on y^(I - rho_i), I = this inner step's number
            s["rho"] = (self.inner_index(now) - self.inner_index(s["G_version"])).astype(np.int64)
            used = [{"client": i, "kind": INNER, "version": int(s["G_version"][i]), "delay": int(s["rho"][i])}
                    for i in np.flatnonzero(s["fresh_G"]).tolist()]
            s["fresh_G"] = np.zeros(self.m, bool)
            s["y"] = s["y"] - self.hp.inner_lr * stored_mean(s["G"], s["G_have"], self.hp.stored_average, self.robust)
            k += 1
            ph = 1 if k >= self.hp.inner_rounds else 0
        else:  # outer step (lines 14-15): H_i computed on x^(t - tau_i)
            s["tau"] = (self.outer_index(now) - self.outer_index(s["H_version"])).astype(np.int64)
            used = [{"client": i, "kind": OUTER, "version": int(s["H_version"][i]), "delay": int(s["tau"][i])}
                    for i in np.flatnonzero(s["fresh_H"]).tolist()]
            s["fresh_H"] = np.zeros(self.m, bool)
            s["x"] = s["x"] - self.hp.outer_lr * stored_mean(s["H"], s["H_have"], self.hp.stored_average, self.robust)
            t, k, ph = t + 1, 0, 0
        step = "outer" if state["counters"][2] else "inner"
        s["counters"] = np.array([t, k, ph])
        return s, {"step": step, "outer_round": t, "used": used, "held": held, "rho": s["rho"].tolist(),
                   "tau": s["tau"].tolist(), "inner_delay_mean": float(s["rho"].mean()),
                   "outer_delay_mean": float(s["tau"].mean())}

    def metrics(self, state: State) -> dict[str, Any]:
        return {**self.task.evaluate(self.task_cfg, self.spec, state["x"], state["y"]), "f1": float("nan")}


def client_work(cfg: Config, task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    hp = AFBOParams.of(cfg)
    t0 = time.perf_counter()
    o = task.client_oracles(TaskSettings.of(cfg), spec, work.pid)
    x, y = work.arrays["x"], work.arrays["y"]
    if work.config["phase"] == INNER:
        batches = minibatch_indices(seed_sequence(cfg.seed, work.round, work.pid, STREAM_BATCHES), o.n_lower,
                                    work.H, cfg.batch_size)
        G, _ = aligned_local_sgd(lambda yy, idx: o.grad_y_g(x, yy, idx), y, batches, hp.lower_lr)
        return Reply(work.pid, {"G": G}, o.num_examples, {"steps": work.H, "compute_s": time.perf_counter() - t0})
    N_i = work.H
    batches = aphe_batches(cfg.seed, work.round, work.pid, o.n_upper, o.n_lower, N_i, cfg.batch_size)
    rng = np.random.default_rng(seed_sequence(cfg.seed, work.round, work.pid, STREAM_APHE))
    H = aphe(lambda idx: o.grad_x_f(x, y, idx), lambda idx: o.grad_y_f(x, y, idx),
             lambda v, idx: o.hvp_yy_g(x, y, v, idx), lambda v, idx: o.jvp_xy_g(x, y, v, idx),
             batches, N_i, hp.lipschitz_g, hp.aphe, rng, int(work.config["N"]))
    return Reply(work.pid, {"H": H}, o.num_examples, {"steps": N_i + 3, "t": int(work.config["t"]),
                                                       "compute_s": time.perf_counter() - t0})
