"""ADBO (Jiao et al., ICLR 2023) on the asynchronous engine, and SDBO, its synchronous version.

The math is ``zofl.algorithms.adbo`` (read its docstring first: the problem with consensus variables
v (upper, ``x`` of the state, the global model) and z (lower, ``y``), the cutting planes that replace the
lower level, the regularized Lagrangian). The server half here runs two kinds of steps, each one version
of the engine:

* outer step (the authors' master loop): workers take one primal step on L in their (x_j, y_j) with the
  duals (theta_j, lam) and their block b_j of the cuts they last received (``worker_step``); the master
  steps when its active set Q (the workers heard from since its last step) holds at least S =
  ``buffer-size`` workers and no worker's last update is ``delay-bound`` = tau or more steps old
  (``may_update``; the server waits for a straggler at the bound): v, z, lam, then theta_j for j in Q.
* cut (after outer step t with t % ``cut-every`` == 0, t = 0 included, as the code's k % pre_epochs):
  drop the cuts whose dual is ~0 (``drop-inactive-cuts``), then K = ``cut-steps`` synchronous rounds of
  the consensus lower problem at the current v (every worker one step on g_j + phi_j^T y +
  (mu/2)||y - z_k||^2, mu = ``cut-penalty``; the master updates z_k, phi_j), each one version; then K
  reverse rounds (phase 2, k = K-1 .. 0: the master sends u_j, the worker returns its adjoint and term of
  grad_v phi, ``adjoint_*``), giving the FULL grad_v phi through the coupled rounds (ours: the code holds
  phi_j, z_k fixed and so converges to a biased point, docs/afbo.md "Cause"; ``cut-gradient`` = "code"
  gives the code's gradient from the same rounds); the master then adds the cut (``new_cut``) with dual
  ``cut-dual-init``; with ``cut-start-gradient`` (ours) its b_j, c also carry phi's gradient through the start
  point (y_j, z) of the K rounds, the adjoints the reverse rounds end with; with ``cut-normalize`` (ours) it is
  stored with a unit normal (the same half-space).

Steps: ``lower-lr`` (worker steps on y_j, both kinds: the code's w_lr), ``outer-lr`` (worker steps on x_j
and master steps on v: hp_lr, v_lr), ``z-lr`` (master steps on z and z_k: z_lr; 0, the default, gives 1 / (mu m):
``z_step_size``), ``dual-lr`` (lam, theta, phi: lbda_lr, theta_lr, phi_lr), ``dual-reg`` (c1 = c2, constant as in
the code).

Choices (ours, labelled in docs/afbo.md): a worker's own variables (x_j, y_j) are kept by the server and
sent with each task (exact: a worker has one task in flight and the server has its last reply); the cuts
live in ``max-cuts`` fixed slots (a full set replaces the cut with the smallest dual); phi_j starts at 0
at every cut as in the code, or at its last value (``cut-warm-start``); an outer reply arriving during
a cut is stored (the code drops it, keeping a stale copy of the worker's variables); one learning rate
for the three duals and one c for both regularizers. SDBO (``strategy = "sdbo"``, engine sync) is the
same method with the active set = all workers every round (needs ``beta`` = 1).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import streams
from ..algorithms.adbo import (
    adjoint_master,
    adjoint_seed,
    adjoint_u,
    adjoint_worker,
    consensus_dual_step,
    cut_dual_step,
    cut_values,
    drop_inactive,
    free_slot,
    lower_master_step,
    lower_worker_step,
    master_step,
    may_update,
    new_cut,
    worker_step,
    z_step_size,
)
from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..core.method import ASYNC, HYPERGRAD, SYNC, Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import (
    Config,
    ConfigError,
    LowerSGD,
    OuterStep,
    Settings,
    TaskSettings,
    choice,
    key,
    nonnegative,
    positive,
)
from ..tasks import DataSpec

STREAM_OUTER, STREAM_CUT = streams.ADBO_OUTER, streams.ADBO_CUT
OUTER, CUT, ADJOINT = "outer", "cut", "adjoint"
CUT_PARAMS = ("cut-every", "cut-steps", "cut-penalty", "cut-dual-init", "max-cuts", "drop-inactive-cuts",
              "cut-warm-start", "dual-lr", "dual-reg", "cut-gradient", "cut-start-gradient", "cut-normalize")


@dataclass(frozen=True)
class Cuts(Settings):
    """The cutting planes and primal-dual steps of ADBO and SDBO."""

    cut_every: int = key(5, "an integer >= 1",
        "ADBO's k_pre: outer steps between cutting-plane updates", "ours", lambda v: v >= 1)
    cut_steps: int = key(5, "an integer >= 1",
        "ADBO: K synchronous rounds of the consensus lower problem behind each new cutting plane",
        "ours", lambda v: v >= 1)
    cut_penalty: float = key(1.0, "a number >= 0",
        "ADBO: mu of the lower problem's (mu/2)||y_j - z||^2", "ours", nonnegative)
    cut_dual_init: float = key(0.0, "a number >= 0",
        "ADBO: a new cutting plane's dual lambda_l", "ours", nonnegative)
    max_cuts: int = key(20, "an integer >= 1",
        "ADBO: cutting-plane slots (a full set replaces the plane with the smallest dual)", "ours", lambda v: v >= 1)
    drop_inactive_cuts: bool = key(True, "true or false",
        "ADBO: remove the planes whose dual is ~0 before a new one is added (the public code's active_set)", "ours")
    cut_warm_start: bool = key(False, "true or false",
        "ADBO: the lower problem's duals phi_j start from their last values (false: from 0, as the code)", "ours")
    z_lr: float = key(0.0, "a number >= 0 (0: 1 / (cut-penalty x num-clients))",
        "ADBO: lr_z, the master's step on z (its outer step and the lower rounds behind a cut; the code's z_lr). 0 "
        "(ours): 1 / (mu m), which makes each lower round's z the exact minimiser of its z part; the rounds "
        "diverge for z-lr x cut-penalty x num-clients > 2 (their z step is on a sum over the m workers)", "ours",
        nonnegative)
    dual_lr: float = key(0.1, "a number > 0",
        "ADBO: ascent step of the duals lambda, theta_j and phi_j", "ours", positive)
    dual_reg: float = key(0.0, "a number >= 0",
        "ADBO: c1 = c2, the regularization of the duals in L", "ours", nonnegative)
    cut_gradient: str = key("full", "'full' or 'code'",
        "ADBO: the cutting plane's a = grad_v phi. full (ours): the v-gradient through the K coupled lower "
        "rounds (the workers' y_j steps, the master's z_k and phi_j), by K reverse rounds; code (the authors' "
        "public code): y_j's own K steps only, phi_j and z_k held fixed, z^K's term dropped (its fixed point is "
        "biased, docs/afbo.md \"ADBO\")", "ours", choice("full", "code"))
    cut_start_gradient: bool = key(False, "true or false (true needs cut-gradient = 'full')",
        "ADBO: the cutting plane's b_j, c also carry phi's gradient through the start point (y_j, z) of the K "
        "lower rounds (the adjoints the reverse rounds end with; ours: then the plane is phi's full first-order "
        "expansion); false: b_j = 2 (y_j - y_j^K), c = 2 (z - z^K), as the authors' code, whose fixed point is "
        "biased by O(||d(y^K, z^K)/d(y_j, z)||)", "ours")
    cut_normalize: bool = key(False, "true or false",
        "ADBO: store each cutting plane divided by the norm of its normal (a, b_j, c): the same half-space, "
        "but its dual no longer has to grow as the plane's gradient 2 (y_j - y_j^K) -> 0 (ours; false: as the "
        "authors' code)", "ours")


@dataclass(frozen=True)
class SDBOParams(LowerSGD, OuterStep, Cuts):
    """SDBO."""



@dataclass(frozen=True)
class ADBOParams(SDBOParams):
    """ADBO."""

    delay_bound: int = key(5, "an integer >= 1",
        "ADBO's tau: the master waits for a worker whose last update is tau - 1 of its steps old (1: all, "
        "every step)", "ours", lambda v: v >= 1)


class ADBO(Method):
    """State: v = x, z = y; the workers' x_j, y_j (xs, ys) and theta_j; the cuts' slots (on, lam, a, b, c,
    kappa); the outer delays and which workers sent since the last outer step (fresh); the lower
    approximation (z_k, phi, traj = y_j^0..y_j^{K-1}, yK, the workers' grad_v parts ga, got = who sent
    this round); counters [t outer steps, phase (0 outer, 1 cut), k cut round, cuts made]."""

    name, title = "adbo", "ADBO"
    kind, needs, default_task = ASYNC, HYPERGRAD, "hyper-cleaning"
    Params = ADBOParams
    one_task_per_version = True  # a worker steps again only when the master has answered it (the code)

    @classmethod
    def check(cls, cfg, task, spec) -> None:
        _check_cut_keys(cfg)  # buffer-size (ADBO's S) above num-clients: refused by Method.check_config

    @classmethod
    def config_warnings(cls, cfg) -> list[str]:
        """The lower rounds behind a cut diverge when z-lr x cut-penalty x num-clients >= 2: the master's z step
        (``lower_master_step``, as the authors' code) is on a sum over the workers, so z_k's own coefficient is
        1 - inner-lr mu m (docs/afbo.md, "ADBO": "Why the defaults diverge")."""
        hp, out = cls.Params.of(cfg), super().config_warnings(cfg)
        gain = z_step_size(hp.z_lr, hp.cut_penalty, cfg.num_clients) * hp.cut_penalty * cfg.num_clients
        if gain >= 2:
            out.append(f"strategy '{cls.name}': z-lr x cut-penalty x num-clients = {gain:g} >= 2, so the lower "
                       f"rounds behind every cutting plane diverge (their z step is on a sum over the workers); use "
                       f"z-lr below {2 / (hp.cut_penalty * cfg.num_clients):g}, or 0 for 1 / (cut-penalty x "
                       f"num-clients) (docs/afbo.md, \"ADBO\")")
        return out

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        self.p, self.q = task.dims(self.task_cfg, spec)
        self.L, self.K = self.hp.max_cuts, self.hp.cut_steps
        self.lr_z = z_step_size(self.hp.z_lr, self.hp.cut_penalty, self.m)  # the master's step on z
        self.rows = max(self.L, 2)  # a task's "rows": b_j (outer), phi_j and z_k (cut), y_j^k and u_j (adjoint)

    def init(self) -> State:
        m, p, q, L, K = self.m, self.p, self.q, self.L, self.K
        x = np.asarray(self.task.init_x(self.task_cfg, self.spec), dtype=np.float64)
        y = np.asarray(self.task.init_y(self.task_cfg, self.spec), dtype=np.float64)
        return {"x": x, "y": y, "xs": np.tile(x, (m, 1)), "ys": np.tile(y, (m, 1)),  # x_j = v, y_j = z: the code
                "theta": np.zeros((m, p)),
                "on": np.zeros(L, bool), "lam": np.zeros(L), "a": np.zeros((L, p)), "b": np.zeros((L, m, q)),
                "c": np.zeros((L, q)), "kappa": np.zeros(L),
                "delay": np.ones(m, np.int64), "fresh": np.zeros(m, bool),
                "zk": np.zeros(q), "phi": np.zeros((m, q)), "traj": np.zeros((K, m, q)), "yK": np.zeros((m, q)),
                "ga": np.zeros((m, p)), "got": np.zeros(m, bool),
                "yb": np.zeros((m, q)), "zb": np.zeros(q), "pb": np.zeros((m, q)), "vb": np.zeros(p),
                "wb": np.zeros((m, q)),
                "counters": np.array([0, 0, 0, 0])}

    @staticmethod
    def phase(state: State) -> str:
        return CUT if state["counters"][1] else OUTER

    # -- tasks ----------------------------------------------------------------------------------
    def plan_task(self, state: State, version: int, task: int, pid: int) -> Work:
        s = state
        t, _, k, cuts = (int(v) for v in s["counters"])
        rows = np.zeros((self.rows, self.q))
        if self.phase(s) == OUTER:
            rows[:self.L] = s["b"][:, pid, :]
            arrays = {"x": s["xs"][pid], "y": s["ys"][pid], "theta": s["theta"][pid], "lam": s["lam"], "rows": rows}
            return Work(pid, task, 1, arrays, {"phase": OUTER, "t": t})
        if int(s["counters"][1]) == 2:  # reverse round k: the point y_j^k of forward round k and the adjoint u_j
            rows[0], rows[1] = s["traj"][k, pid], self._u(s)[pid]
            arrays = {"x": s["x"], "y": s["traj"][k, pid], "theta": np.zeros(self.p), "lam": np.zeros(self.L),
                      "rows": rows}
            return Work(pid, task, 1, arrays, {"phase": ADJOINT, "k": k, "cut": cuts, "last": 0})
        rows[0], rows[1] = s["phi"][pid], s["zk"]
        arrays = {"x": s["x"], "y": s["traj"][k, pid], "theta": np.zeros(self.p), "lam": np.zeros(self.L),
                  "rows": rows}
        return Work(pid, task, 1, arrays, {"phase": CUT, "k": k, "cut": cuts, "last": int(k == self.K - 1)})

    def _u(self, s: State) -> np.ndarray:
        """The adjoints u_j of y_j^{k+1} that reverse round k sends (``adjoint_u``). With ``cut-gradient`` =
        "code" (the authors' gradient, ``unrolled_grad_v``: phi_j and z_k held fixed, z^K's term dropped) u_j is
        y_j's own adjoint alone: the same rounds then sum the code's gradient."""
        if self.hp.cut_gradient == "code":
            return s["yb"]
        return adjoint_u(s["yb"], s["zb"], s["pb"], self.hp.cut_penalty, self.lr_z, self.hp.dual_lr)

    def task_steps(self, work: Work) -> int:
        return work.H

    def task_reply_shapes(self, state: State, work: Work) -> dict[str, tuple[int, ...]]:
        return self._shapes(work.config["phase"])

    def _shapes(self, phase: str) -> dict[str, tuple[int, ...]]:
        if phase == OUTER:
            return {"x": (self.p,), "y": (self.q,)}
        return {"w": (self.q,), "a": (self.p,)} if phase == ADJOINT else {"y": (self.q,)}

    # -- arrivals and the active set -------------------------------------------------------------
    def counts(self, state: State, reply: Reply) -> bool:
        """A reply of the current step's kind (an outer reply during a cut is stored, not counted)."""
        return ("x" in reply.arrays) == (self.phase(state) == OUTER)

    def receive(self, state: State, reply: Reply, staleness: int) -> State:
        """Store a worker's new variables at once: outer (x_j, y_j; delay 0, in Q), or cut round k's y_j^{k+1}."""
        s, j = dict(state), reply.pid
        if "x" in reply.arrays:
            for key in ("xs", "ys", "delay", "fresh", "traj"):
                s[key] = s[key].copy()
            s["xs"][j], s["ys"][j], s["delay"][j], s["fresh"][j] = reply.arrays["x"], reply.arrays["y"], 0, True
            if int(s["counters"][1]) == 1:  # in flight when the cut began (round 0 waits for it): start from it
                s["traj"][0, j] = reply.arrays["y"]
            return s
        k = int(s["counters"][2])
        if "w" in reply.arrays:  # reverse round k: worker j's adjoint of y_j^k and its term of grad_v phi
            s["wb"], s["ga"], s["got"] = s["wb"].copy(), s["ga"].copy(), s["got"].copy()
            s["wb"][j], s["ga"][j], s["got"][j] = reply.arrays["w"], reply.arrays["a"], True
            return s
        key = "yK" if k == self.K - 1 else "traj"
        s[key], s["got"] = s[key].copy(), s["got"].copy()
        if k == self.K - 1:
            s["yK"][j] = reply.arrays["y"]
        else:
            s["traj"][k + 1, j] = reply.arrays["y"]
        s["got"][j] = True
        return s

    def buffer_size(self) -> int:
        return self.cfg.buffer_size

    def ready(self, state: State, replies: list[Reply]) -> bool:
        """Outer: |Q| >= S and every delay below tau (``may_update``); cut: every worker has sent this round."""
        if self.phase(state) == CUT:
            return bool(state["got"].all())
        delays = np.where(state["fresh"], 0, state["delay"])
        return may_update(int(state["fresh"].sum()), delays, self.cfg.buffer_size, self.hp.delay_bound)

    # -- the master's steps ------------------------------------------------------------------------
    def update_async(self, state: State, version: int, replies: list[Reply],
                     staleness: list[int]) -> tuple[State, dict[str, Any]]:
        s = dict(state)
        if self.phase(s) == OUTER:
            return self._outer_step(s)
        return self._cut_round(s)

    def _outer_step(self, s: State) -> tuple[State, dict[str, Any]]:
        t, _, _, cuts = (int(v) for v in s["counters"])
        Q = s["fresh"]
        hp = self.hp
        s["x"], s["y"] = master_step(s["x"], s["y"], s["theta"], s["lam"], s["a"], s["c"], hp.outer_lr, self.lr_z)
        values = cut_values(s["a"], s["b"], s["c"], s["kappa"], s["x"], s["ys"], s["y"])
        s["lam"] = cut_dual_step(s["lam"], s["on"], values, self.hp.dual_lr, self.hp.dual_reg)
        s["theta"] = consensus_dual_step(s["theta"], s["xs"], s["x"], Q, self.hp.dual_lr, self.hp.dual_reg)
        s["delay"], s["fresh"] = s["delay"] + 1, np.zeros(self.m, bool)
        fields = {"step": OUTER, "outer_round": t + 1, "active": int(Q.sum()), "cuts": int(s["on"].sum()),
                  "max_cut_violation": float(np.max(values, where=s["on"], initial=0.0)),
                  "consensus_gap": float(np.abs(s["xs"] - s["x"]).max())}
        s["counters"] = np.array([t + 1, 0, 0, cuts])
        if t % self.hp.cut_every == 0:  # the code's k % pre_epochs == 0, after the step (so also after the first)
            s = self._start_cut(s)
        return s, fields

    def _start_cut(self, s: State) -> State:
        """Drop the inactive cuts, start the lower approximation from (y_j, z) with phi = 0 (or warm)."""
        if self.hp.drop_inactive_cuts:
            s["on"] = drop_inactive(s["lam"], s["on"])
            s["lam"] = np.where(s["on"], s["lam"], 0.0)
        s["zk"] = s["y"].copy()
        if not self.hp.cut_warm_start:
            s["phi"] = np.zeros((self.m, self.q))
        s["traj"] = s["traj"].copy()
        s["traj"][0] = s["ys"]
        s["got"] = np.zeros(self.m, bool)
        s["counters"] = np.array([s["counters"][0], 1, 0, s["counters"][3]])
        return s

    def _cut_round(self, s: State) -> tuple[State, dict[str, Any]]:
        """Forward round k of the lower problem (phase 1) or reverse round k (phase 2, k = K-1 .. 0); after
        reverse round 0 the cut is added."""
        t, ph, k, cuts = (int(v) for v in s["counters"])
        if ph == 2:
            return self._adjoint_round(s)
        last = k == self.K - 1
        new = s["yK"] if last else s["traj"][k + 1]
        if not s["got"].all():  # sync engine with failed workers: a silent worker's y stays where it was
            new = np.where(s["got"][:, None], new, s["traj"][k])
        s["zk"], s["phi"] = lower_master_step(s["zk"], new, s["phi"], self.hp.cut_penalty, self.lr_z,
                                              self.hp.dual_lr)
        s["got"] = np.zeros(self.m, bool)
        fields = {"step": CUT, "outer_round": t, "cut_round": k + 1, "cuts": int(s["on"].sum())}
        if not last:
            s["counters"] = np.array([t, 1, k + 1, cuts])
            return s, fields
        s["yK"] = new
        s["yb"], s["zb"], s["pb"] = adjoint_seed(s["ys"], new, s["y"], s["zk"])
        s["vb"], s["ga"] = np.zeros(self.p), np.zeros((self.m, self.p))
        s["counters"] = np.array([t, 2, self.K - 1, cuts])
        return s, fields

    def _adjoint_round(self, s: State) -> tuple[State, dict[str, Any]]:
        """Reverse round k: grad_v phi += sum_j (workers' terms); the adjoints of y_j^k (workers), z^k and
        phi_j^k (master). A silent worker (sync engine, failures) contributes nothing this round."""
        t, _, k, cuts = (int(v) for v in s["counters"])
        u, got = self._u(s), s["got"]
        s["zb"], s["pb"] = adjoint_master(s["zb"], s["pb"], u, self.hp.cut_penalty, self.hp.lower_lr, self.lr_z,
                                          self.hp.dual_lr)
        s["yb"] = np.where(got[:, None], s["wb"], 0.0)
        s["vb"] = s["vb"] + s["ga"][got].sum(axis=0)
        s["got"], s["ga"] = np.zeros(self.m, bool), np.zeros((self.m, self.p))
        fields = {"step": ADJOINT, "outer_round": t, "cut_round": self.K + (self.K - k), "cuts": int(s["on"].sum())}
        if k > 0:
            s["counters"] = np.array([t, 2, k - 1, cuts])
            return s, fields
        start = (s["yb"], s["zb"]) if self.hp.cut_start_gradient else (None, None)  # the adjoints of y_j^0, z^0
        a, b, c, kappa = new_cut(s["vb"], s["x"], s["ys"], s["yK"], s["y"], s["zk"], *start)
        if self.hp.cut_normalize:  # the same half-space with a unit normal (ours; the duals then are forces)
            scale = float(np.sqrt(a @ a + np.sum(b * b) + c @ c))
            if scale > 0:
                a, b, c, kappa = a / scale, b / scale, c / scale, kappa / scale
        slot = free_slot(s["lam"], s["on"])
        for name, val in (("a", a), ("b", b), ("c", c)):
            s[name] = s[name].copy()
            s[name][slot] = val
        s["kappa"], s["lam"], s["on"] = s["kappa"].copy(), s["lam"].copy(), s["on"].copy()
        s["kappa"][slot], s["lam"][slot], s["on"][slot] = kappa, self.hp.cut_dual_init, True
        s["delay"], s["fresh"] = np.ones(self.m, np.int64), np.zeros(self.m, bool)  # the code: taus = 1
        s["counters"] = np.array([t, 0, 0, cuts + 1])
        phi = float(np.sum((s["ys"] - s["yK"]) ** 2) + np.sum((s["y"] - s["zk"]) ** 2))
        return s, {**fields, "cuts": int(s["on"].sum()), "phi_at_cut": phi}

    def metrics(self, state: State) -> dict[str, Any]:
        return {**self.task.evaluate(self.task_cfg, self.spec, state["x"], state["y"]), "f1": float("nan")}


class SDBO(ADBO):
    """SDBO: ADBO with the active set = every worker, on the synchronous engine (one version per round)."""

    name, title = "sdbo", "SDBO"
    kind = SYNC
    Params = SDBOParams
    one_task_per_version = False

    @classmethod
    def check(cls, cfg, task, spec) -> None:
        _check_cut_keys(cfg)
        if cfg.beta != 1:
            raise ConfigError(f"run-config key 'beta' must be 1 for strategy 'sdbo' (every worker in every "
                              f"round), got {cfg.beta}")

    def plan(self, state: State, r: int, sampled: list[int], stragglers: list[int]) -> list[Work]:
        """Every sampled worker's task (a straggler of an outer round keeps its x_j, y_j: H = 0)."""
        works = [self.plan_task(state, r, r, pid) for pid in sampled]
        for w in works:
            if w.pid in stragglers and w.config["phase"] == OUTER:
                w.H = 0
        return works

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        return self._shapes((OUTER, CUT, ADJOINT)[int(state["counters"][1])])

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        r = plan.r
        for rep in replies:
            state = self.receive(state, rep, 0)
        return self.update_async(state, r, replies, [0] * len(replies))


def _check_cut_keys(cfg) -> None:
    hp = SDBOParams.of(cfg)
    if hp.cut_start_gradient and hp.cut_gradient != "full":
        raise ConfigError("run-config key 'cut-start-gradient' = true needs 'cut-gradient' = 'full' (the start "
                          f"point's adjoints come from the reverse rounds through the coupled lower rounds), got "
                          f"{hp.cut_gradient!r}")


# -- the client half ---------------------------------------------------------------------------------
def client_work(cfg: Config, task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    hp = SDBOParams.of(cfg)
    t0 = time.perf_counter()
    o = task.client_oracles(TaskSettings.of(cfg), spec, work.pid)
    a, c = work.arrays, work.config
    if c["phase"] == OUTER:
        x, y = a["x"], a["y"]
        if work.H:  # one step on L (a straggler of SDBO's sync engine keeps its variables)
            idx = minibatch_indices(seed_sequence(cfg.seed, STREAM_OUTER, work.round, work.pid), o.n_upper, 1,
                                    cfg.batch_size)[0]
            L = len(a["lam"])
            x, y = worker_step(o.grad_x_f(x, y, idx), o.grad_y_f(x, y, idx), x, y, a["theta"], a["lam"],
                               a["rows"][:L], hp.outer_lr, hp.lower_lr)
        return Reply(work.pid, {"x": x, "y": y}, o.num_examples,
                     {"steps": work.H, "compute_s": time.perf_counter() - t0})
    v, k = a["x"], int(c["k"])

    def batch(step: int) -> np.ndarray:  # step k's minibatch of cut number c["cut"]: the same in the reverse pass
        return minibatch_indices(seed_sequence(cfg.seed, STREAM_CUT, int(c["cut"]), step, work.pid), o.n_lower, 1,
                                 cfg.batch_size)[0]

    if c["phase"] == ADJOINT:  # reverse round k: products at forward round k's point, on its minibatch
        y_k, u = a["rows"][0], a["rows"][1]
        w, g = adjoint_worker(u, o.hvp_yy_g(v, y_k, u, batch(k)), o.jvp_xy_g(v, y_k, u, batch(k)), hp.cut_penalty,
                              hp.lower_lr)
        return Reply(work.pid, {"w": w, "a": g}, o.num_examples,
                     {"steps": work.H, "compute_s": time.perf_counter() - t0})
    phi_j, z_k = a["rows"][0], a["rows"][1]
    out = {"y": lower_worker_step(o.grad_y_g(v, a["y"], batch(k)), a["y"], phi_j, z_k, hp.cut_penalty,
                                  hp.lower_lr)}
    return Reply(work.pid, out, o.num_examples, {"steps": work.H, "compute_s": time.perf_counter() - t0})
