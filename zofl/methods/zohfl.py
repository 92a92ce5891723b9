"""ZO-HFL (the ZO-HFL paper, Algorithms 1 and 2): server half and client half over ``zofl.algorithms.zohfl``.

Server (``ZOHFL``, a ``Method``) -- Algorithm 1:
  plan    (Method) every sampled client gets x_r, its round number and H_{i,r} (0 for a straggler);
          directions v_{i,r} are not sent: both sides derive them from (seed, round, client id).
  update  f2(x_r +- eta v, y+-) per client (from the uploaded y's, or the uploaded scalars), the
          two-point estimate, grad f1 on a server minibatch, the step.
Client (``client_work``) -- Algorithm 2 twice per direction, via ``client_solve``.

Problem (1) in general: ``hierarchy`` takes f2, grad_y h_i and Proj_{Y_i(x)} from the task's
optional hooks, else the paper's Sec. IV instance (lambda, mu, ball-radius).

Choices the paper leaves open (run-config keys, see zofl.config and docs/zohfl.md): y_0 = the
query point; weighting of the client estimates (``weighting``); common random numbers
(``crn``); ``directions`` per client; x_0 (``x0``); uplink of vectors or scalars (``uplink``);
the offset Gamma of the client step (``client-lr-gamma``).
Ours, beyond the paper: ``orthogonal-directions`` (a client's k directions orthonormal) and
``estimator = "envelope"`` (sum_i w_i lambda (x - y_i(x)) from one solve at x_r, instead of the
two-point estimate; see ``zofl.algorithms.zohfl.envelope_estimate``).
A client with H = 0 (a straggler) adds exactly 0, for any task (``client_solve``; the server
zeroes it too when it computes f2 from uploaded vectors); a client not in S_r is not contacted
and counts the same.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms.lower_level import minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import (
    STREAM_BATCHES,
    STREAM_SERVER_BATCH,
    Hierarchy,
    SolveSpec,
    client_directions,
    client_solve,
    client_weights,
    default_hierarchy,
    envelope_estimate,
    f2_values_from_vectors,
    lower_sgd,
    server_step_size,
    server_update,
    straggler_f2_values,
    zo_estimate,
)
from ..core.method import Method, RoundPlan, State
from ..core.protocol import Reply, Work
from ..settings import (
    CommonRandom,
    Config,
    ConfigError,
    Robust,
    ServerOptimizer,
    Settings,
    Smoothing,
    choice,
    key,
    nonnegative,
    positive,
)
from ..tasks import DataSpec, Task
from ..tasks.base import data_shape


def solve_spec(cfg: Config) -> SolveSpec:
    hp = ZOHFLParams.of(cfg)
    return SolveSpec(eta=hp.eta, lam=hp.lambda_, mu=hp.mu, lr0=hp.client_lr, batch_size=cfg.batch_size,
                     radius=hp.ball_radius, crn=hp.crn, Gamma=hp.client_lr_gamma)


HOOKS = ("hfl_f2", "hfl_lower_grad", "hfl_project")
# keys the envelope estimate does not read (warned about when set: config_warnings)
ENVELOPE_UNUSED = ("directions", "orthogonal-directions", "uplink", "eta", "crn", "coef-clip")


def hierarchy(cfg: Config, task: Task, data=None) -> Hierarchy:
    """Problem (1) of the run: the task's hooks where it has them, else the paper's instance.

    A task may define any of (all optional; see zofl.tasks.toy:HierarchicalQuadratic):
      ``hfl_f2(hp, x, y) -> float``                  f2(x, y_i)
      ``hfl_lower_grad(hp, data, x, y, idx) -> g``   grad_y h_i(x, y) on minibatch idx of the client's data
      ``hfl_project(hp, data, x, y) -> y``           the projection onto Y_i(x), client i's own set
    ``hp`` is the run's ``ZOHFLParams`` (its typed values: hp.lambda_, hp.mu, hp.ball_radius, ...);
    ``data`` is the client's ArrayData (None on the server, which needs only f2): what makes h_i
    and Y_i client i's."""
    hp = ZOHFLParams.of(cfg)
    loss_grad = None if data is None else (lambda p, idx: task.grad(p, data.x[idx], data.y[idx]))
    base = default_hierarchy(loss_grad, hp.lambda_, hp.mu, hp.ball_radius)
    f2 = getattr(task, "hfl_f2", None)
    lower = getattr(task, "hfl_lower_grad", None)
    project = getattr(task, "hfl_project", None)
    return Hierarchy(
        (lambda x, y: f2(hp, x, y)) if f2 else base.f2,
        (lambda x, y, idx: lower(hp, data, x, y, idx)) if lower else base.lower_grad,
        (lambda x, y: project(hp, data, x, y)) if project else base.project)


@dataclass(frozen=True)
class UpperStep(Settings):
    """ZO-HFL's server step on f1 (and the f1-only control's)."""

    gamma: float = key(0.01, "a number > 0",
        "server step gamma_r = gamma / sqrt(r + 1)", "paper", positive)
    server_batch_size: int = key(32, "an integer >= 1",
        "server minibatch size for grad f1", "ours", lambda v: v >= 1)


@dataclass(frozen=True)
class ZOHFLParams(Smoothing, CommonRandom, UpperStep, ServerOptimizer):
    """ZO-HFL (paper 003)."""

    client_lr: float = key(0.1, "a number > 0",
        "g~: client step g~ / (t + Gamma)", "paper", positive)
    client_lr_gamma: float = key(1.0, "a number > 0",
        "Gamma of the client step g~ / (t + Gamma): 1 in the experiments; Proposition 1's rate needs mu_h g~ > 1 "
        "and g~ / Gamma <= mu_h / (2 L^2), so Gamma > 2 (L / mu_h)^2 >= 2 (docs/zohfl.md)", "paper", positive)
    lambda_: float = key(10.0, "a number >= 0",
        "weight of f2 = (lambda/2)||x - y_i||^2", "ours", nonnegative, name="lambda")
    mu: float = key(1.0, "a number > 0",
        "proximal weight of h_i = loss_i(y) + (mu/2)||x - y||^2", "ours", positive)
    directions: int = key(1, "an integer >= 1",
        "sphere directions per client per round (paper: 1)", "paper", lambda v: v >= 1)
    orthogonal_directions: bool = key(False, "true or false",
        "the k = directions of a client in a round are orthonormal (ours; default: independent draws)", "ours")
    estimator: str = key("two-point", "'two-point' or 'envelope'",
        "ZO-HFL's f2 part: the paper's two-point estimate, or (ours, beyond the paper) sum_i w_i lambda "
        "(x - y_i(x)) from one solve at x_r per client (the gradient of a Moreau-envelope objective, not of "
        "problem (1); each client uploads y_i, n floats; needs ball-radius = 0)",
        "ours", choice("two-point", "envelope"))
    uplink: str = key("scalars", "'scalars' or 'vectors'",
        "vectors: clients send y+ and y- (the paper); scalars: the two f2 values (same iterates)",
        "ours", choice("scalars", "vectors"))
    weighting: str = key("uniform", "'uniform', 'participants' or 'rho'",
        "w_i of a client's estimate: 1/m (Alg. 1), 1/|S_r|, or rho_i = N_i/N_train",
        "paper", choice("uniform", "participants", "rho"))
    ball_radius: float = key(0.0, "a number >= 0",
        "radius of Y_i(x) = {||y - x|| <= radius}; 0 = R^n", "ours", nonnegative)


class ZOHFL(Method):
    """Algorithm 1 of the ZO-HFL paper (server side)."""

    name, title = "zohfl", "ZO-HFL"
    Params = ZOHFLParams
    needs_server_data = "ZO-HFL's upper objective f1 is the loss on the server's data (Eq. 1 of its paper)"

    @classmethod
    def check_config(cls, cfg) -> None:
        hp = cls.Params.of(cfg)
        super().check_config(cfg)
        if hp.estimator == "envelope" and hp.ball_radius > 0:
            raise ConfigError(f"run-config key 'ball-radius' = {hp.ball_radius} with estimator = 'envelope': with the "
                              f"ball Y_i(x) binding, lambda (x - y_i) is no longer lambda / mu times the gradient of "
                              f"client i's Moreau envelope (its factor becomes client- and round-dependent; "
                              f"zofl.algorithms.zohfl.envelope_estimate); use ball-radius = 0 or estimator = "
                              f"'two-point'")

    @classmethod
    def config_warnings(cls, cfg) -> list[str]:
        hp = cls.Params.of(cfg)
        out = super().config_warnings(cfg)
        defaults = {k.name: k for k in (*cls.Params.keys(), *Robust.keys())}  # ENVELOPE_UNUSED: its own and coef-clip
        unused = [k for k in ENVELOPE_UNUSED if cfg[k] != defaults[k].default] if hp.estimator == "envelope" else []
        if unused:
            out.append(f"run-config key(s) {', '.join(repr(k) for k in unused)} set, but estimator = 'envelope' "
                       f"does not read them: one solve at x_r per client, no directions, no two-point "
                       f"coefficients, and every client uploads its y_i (n floats) whatever 'uplink' says")
        return out

    def __init__(self, cfg, task, spec):
        super().__init__(cfg, task, spec)
        self.check(cfg, task, spec, n=int(np.asarray(
            task.init_params(self.test_data.x.shape[1], self.test_data.num_classes)).size))
        self.f2 = hierarchy(cfg, task).f2

    @classmethod
    def check(cls, cfg: Config, task: Task, spec: DataSpec, n: int | None = None) -> None:
        """The rules that need the task (``zofl.setup.check_run``: the runner checks them for every
        cell before any cell runs): the envelope estimate needs the paper's f2, h_i and no constraint
        set (``envelope_estimate``): no hooks; and orthonormal directions are at most the model's dimension n
        (given, or from the data's shape alone, ``zofl.tasks.base.data_shape``: no dataset is read
        for a built-in task; the method checks again with the data it loaded)."""
        hp = cls.Params.of(cfg)
        if hp.estimator == "envelope":
            own = [h for h in HOOKS if hasattr(task, h)]
            if own:
                raise ConfigError(f"run-config key 'estimator': 'envelope' follows the gradient of the clients' Moreau "
                                  f"envelopes only for the paper's f2 = (lambda/2)||x - y||^2, h_i = loss_i(y) + "
                                  f"(mu/2)||x - y||^2 and Y_i(x) = R^n; task {cfg.task!r} defines its own "
                                  f"{', '.join(own)} (use 'two-point')")
        if hp.orthogonal_directions and hp.directions > 1:
            n = model_dim(task, spec) if n is None else n
            if hp.directions > n:
                raise ConfigError(f"run-config key 'directions': {hp.directions} orthogonal directions exceed the "
                                  f"model's dimension {n}")

    @property
    def clips_coefficients(self) -> bool:
        """coef-clip clips the two-point coefficients (the envelope estimate has none)."""
        return self.hp.estimator == "two-point"

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        k, n = self.hp.directions, state["x"].size
        if self.hp.estimator == "envelope":
            return {"y": (n,)}
        return {"y_plus": (k, n), "y_minus": (k, n)} if self.hp.uplink == "vectors" else {"f": (2, k)}

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        r = plan.r
        cfg, x = self.cfg, state["x"]
        if self.hp.estimator == "envelope":
            return self.update_envelope(state, plan, replies)
        n = x.size
        f_values, dirs = {}, {}
        idle = idle_clients(plan)
        for rep in replies:
            v = client_directions(cfg.seed, r, rep.pid, self.hp.directions, n, self.hp.orthogonal_directions)
            if rep.pid in idle:  # H = 0: exactly 0, whatever f2 gives at the uploaded y's
                f_values[rep.pid] = straggler_f2_values(self.hp.directions)
            elif self.hp.uplink == "vectors":
                f_values[rep.pid] = f2_values_from_vectors(x, v, rep.arrays["y_plus"], rep.arrays["y_minus"],
                                                           self.hp.eta, self.f2)
            else:
                f_values[rep.pid] = (rep.arrays["f"][0], rep.arrays["f"][1])
            dirs[rep.pid] = v
        pids = sorted(f_values)
        weights = client_weights(self.hp.weighting, pids, self.m, {rep.pid: rep.num_examples for rep in replies},
                                 self.n_train)
        g_f2 = zo_estimate(weights, f_values, dirs, self.hp.eta, n, self.robust, cfg.coef_clip)
        grad_f1 = self.grad_f1(x, r)
        gamma_r = server_step_size(self.hp.gamma, r)
        f2_est = float(np.mean([(f_values[p][0].mean() + f_values[p][1].mean()) / 2 for p in pids])) \
            if pids else float("nan")
        return self.upper_step(state, grad_f1, g_f2, gamma_r, r), {"f2_est": f2_est, "gamma_r": gamma_r}

    def upper_step(self, state: State, grad_f1: np.ndarray, g_f2: np.ndarray, gamma_r: float, r: int) -> State:
        """Alg. 1, line 8: x_{r+1} = x_r - gamma_r (grad f1 + g_f2) (``server_update``); with a server optimizer
        (ours) that step's direction -(grad f1 + g_f2) through it (``Method.server_step``)."""
        if self.hp.server_optimizer == "sgd":
            return {**state, "x": server_update(state["x"], grad_f1, g_f2, gamma_r)}
        return self.server_step(state, -(grad_f1 + g_f2), gamma_r, r + 1)

    def grad_f1(self, x: np.ndarray, r: int) -> np.ndarray:
        """grad f1~(x_r, xi_r) on a server minibatch (0 without server data)."""
        cfg = self.cfg
        if not len(self.server_data):
            return np.zeros(x.size)
        idx = minibatch_indices(seed_sequence(cfg.seed, r, STREAM_SERVER_BATCH), len(self.server_data), 1,
                                self.hp.server_batch_size)[0]
        return self.task.grad(x, self.server_data.x[idx], self.server_data.y[idx])

    def update_envelope(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        """estimator = envelope (ours): g = grad f1~ + sum_i w_i lambda (x_r - y_i(x_r))."""
        x, r = state["x"], plan.r
        idle = idle_clients(plan)  # H = 0: y = x, adding exactly 0
        ys = {rep.pid: x if rep.pid in idle else rep.arrays["y"] for rep in replies}
        weights = client_weights(self.hp.weighting, sorted(ys), self.m, {rep.pid: rep.num_examples for rep in replies},
                                 self.n_train)
        g_f2 = envelope_estimate(weights, ys, x, self.hp.lambda_, self.robust)
        gamma_r = server_step_size(self.hp.gamma, r)
        f2_est = float(np.mean([self.f2(x, y) for y in ys.values()])) if ys else float("nan")
        return self.upper_step(state, self.grad_f1(x, r), g_f2, gamma_r, r), {"f2_est": f2_est, "gamma_r": gamma_r}


def idle_clients(plan: RoundPlan) -> set[int]:
    """The clients whose work had H = 0 (the stragglers, or everyone when H_r = 0), as the round's plan sent it."""
    return {w.pid for w in plan.works if w.H == 0}


def model_dim(task: Task, spec: DataSpec) -> int:
    """n, the length of the task's flattened model, from the data's shape alone."""
    return int(np.asarray(task.init_params(*data_shape(task, spec))).size)


def client_work(cfg: Config, task: Task, spec: DataSpec, work: Work, state: dict[str, np.ndarray]) -> Reply:
    """Client i's work in round r: Algorithm 2 at x_r +- eta v_j for each of its directions (or, with
    estimator = envelope, once at x_r itself)."""
    hp = ZOHFLParams.of(cfg)
    t0 = time.perf_counter()
    pid, r, H = work.pid, work.round, work.H
    data = task.client_data(spec, pid)
    x = work.arrays["x"]
    if hp.estimator == "envelope":
        batches = minibatch_indices(seed_sequence(cfg.seed, r, pid, STREAM_BATCHES, 0, 0), len(data), H,
                                    cfg.batch_size)
        y = lower_sgd(hierarchy(cfg, task, data), x, x, batches, hp.client_lr, hp.client_lr_gamma)
        return Reply(pid, {"y": y}, len(data), {"H": H, "steps": H, "compute_s": time.perf_counter() - t0})
    v = client_directions(cfg.seed, r, pid, hp.directions, x.size, hp.orthogonal_directions)
    res = client_solve(hierarchy(cfg, task, data), len(data), x, v, H, solve_spec(cfg),
                       (cfg.seed, r, pid, STREAM_BATCHES))
    out = {"y_plus": res.y_plus, "y_minus": res.y_minus} if hp.uplink == "vectors" \
        else {"f": np.stack([res.f_plus, res.f_minus])}
    return Reply(pid, out, len(data), {"H": H, "steps": res.steps, "compute_s": time.perf_counter() - t0})
