"""``Method``: the server half of an algorithm, as a plain object with explicit state.

In the spirit of FedJAX's ``FederatedAlgorithm(init, apply)``: the object holds only what never
changes during a run (config, task, data); everything that does is in the ``State`` passed in
and returned (a dict of numpy arrays with at least ``x``, the global model), so a checkpoint is
``state_dict(state)`` and nothing else. The engines call, per synchronous round r:

    works = method.plan(state, r, sampled, stragglers)     # per-client Work
    ... the clients run ``client_work`` (the method module's client half) ...
    state, fields = method.update(state, plan, replies)    # plan: the round's RoundPlan (r, S_r, the works);
                                                           # replies: checked, sorted by client id

and ``method.metrics(state)`` for the round record. An asynchronous method (``asynchronous =
True``) instead has ``plan_task``, ``task_steps``, ``ready`` and ``update_async``, see
``zofl.methods.fedbuff`` and ``zofl.methods.afbo``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from .. import streams
from ..algorithms.lower_level import local_steps
from ..algorithms.robust import combine_with
from ..algorithms.server_opt import OPT_STATE, init_state, server_step
from ..algorithms.smoothing import seed_sequence
from ..settings import ConfigError, NoParams, Robust, ServerMomentum, ServerOptimizer, Settings, TaskSettings
from .evaluation import model_metrics
from .protocol import Reply, Work
from .sampling import round_size

State = dict[str, np.ndarray]


def pretrain(task, x: np.ndarray, data, epochs: int, lr: float, batch_size: int, seed: int) -> np.ndarray:
    """x_0 = ``epochs`` epochs of plain SGD on the server's data (x0 = pretrained; our choice)."""
    rng = np.random.default_rng(seed_sequence(seed, streams.PRETRAIN))
    x = x.copy()
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            x -= lr * task.grad(x, data.x[idx], data.y[idx])
    return x


@dataclass
class RoundPlan:
    """A synchronous round as planned (``zofl.core.rounds.SyncRun.plan``): S_r, the stragglers and each
    sampled client's Work; handed to ``Method.update`` with the replies."""

    r: int  # the papers' 0-based round index
    sampled: list[int]  # S_r
    stragglers: list[int]
    works: list[Work]
    H: int = 0
    t0: float = field(default_factory=time.perf_counter)
    downlink_bytes: int | None = None  # None: the works' arrays
    unreachable: list[int] = field(default_factory=list)  # sampled, but no SuperNode holds the partition


SYNC, ASYNC, CONTROL = "sync", "async", "control"  # a method's kind
MODEL, BILEVEL, HYPERGRAD = "model", "bilevel", "hypergrad"  # the kind of task a method needs


class Method:
    """Shared defaults: x_0, one H for the round, x as the only downlink array, evaluation.

    A subclass declares, once, what the rest of zofl needs to know about its method: the attributes
    below. The registry ``zofl.methods.METHODS`` and every list derived from it (the values of the
    run-config key ``strategy``, the engine routing, which keys a method reads, ``zofl run --help``)
    read them; adding a method is its module and one line there (docs/architecture.md)."""

    name = "base"  # the run-config value of ``strategy``
    title = "base"  # for printed summaries
    kind = SYNC  # SYNC: rounds (engines sync and legacy); ASYNC: the async engine only; CONTROL: server-only rounds
    needs = MODEL  # the task it needs: MODEL a zofl.tasks.base.Task, BILEVEL a BilevelTask, HYPERGRAD a hypergrad task
    default_task = "softmax"  # the task ``zofl run --strategy NAME`` takes when the run-config names none of its kind
    Params: type = NoParams  # its typed parameters: a zofl.settings.Settings dataclass of the keys it reads
    params: tuple[str, ...] = ()  # derived from Params: those keys' names (zofl.methods.READ_BY)
    flower_fedavg = False  # driven by Flower's own FedAvg strategy (the cross-check, strategy flwr-fedavg)
    phased = False  # a round of num-rounds is several communication rounds of phases (FedNest, FedRZO_bl)
    local_steps_optional = False  # H = 0 is one of the method's settings (FedRZO_bl's Fig. 2): no rule against it
    one_task_per_version = False  # async: a client that replied at this version waits for the next
    needs_server_data: str | None = None  # why the method cannot run with server-data = none (None: it can)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = isinstance(cls.Params, type) and issubclass(cls.Params, Settings)
        cls.params = cls.Params.names() if declared else ()  # not declared: zofl.methods.register refuses it

    @property
    def server_only(self) -> bool:
        """A control (zofl.methods.controls): no client is sampled or contacted."""
        return self.kind == CONTROL

    @classmethod
    def check_config(cls, cfg) -> None:
        """Rules of the run-config alone for this method (``zofl.config.parse_config`` calls it, for every
        run-config): a ConfigError naming the key. Default: a method with clients must be able to reach
        min-replies and to take local steps, and a buffer its clients fill one update each must be able to fill."""
        if cls.kind == CONTROL:
            return
        per_round = round_size(cfg.beta, cfg.num_clients)
        if cfg.engine != "async" and cfg.min_replies > per_round:
            raise ConfigError(f"run-config key 'min-replies' = {cfg.min_replies} is more than the {per_round} "
                              f"client(s) sampled per round (beta * num-clients): every round would fail")
        if cfg.tau == 0 and cfg.local_steps == 0 and not cls.local_steps_optional:
            raise ConfigError("run-config keys 'tau' and 'local-steps' are both 0: no client would ever take a local "
                              "step (H_{i,r} = 0); set tau > 0 or local-steps >= 1")
        if cls.one_task_per_version and cfg.buffer_size > cfg.num_clients:  # AFBO, AFBO-global, ADBO (its S)
            raise ConfigError(f"run-config key 'buffer-size' = {cfg.buffer_size} is more than num-clients = "
                              f"{cfg.num_clients}: each client sends one update per server step, so the buffer could "
                              f"never fill")

    @classmethod
    def config_warnings(cls, cfg) -> list[str]:
        """Settings of this method that run but mean something a user may not intend (``zofl.config.
        config_warnings``)."""
        if cfg.straggler_prob == 1 and cfg.engine != "async" and cls.kind != CONTROL and not cls.local_steps_optional:
            return ["run-config key 'straggler-prob' = 1: every sampled client is a straggler (H = 0) in every round, "
                    "so no client ever takes a local step (for ZO-HFL this is its server steps alone, the f1-only "
                    "control); use a value below 1 to train on the clients"]
        return []

    @classmethod
    def updates_per_step(cls, cfg) -> tuple[str, int]:
        """How many client updates a server step combines, and the key that sets it (the robust rules'
        warning): a synchronous round's sampled clients (beta), an asynchronous window's num-clients."""
        if cls.kind == ASYNC:
            return "num-clients", cfg.num_clients
        return "beta", round_size(cfg.beta, cfg.num_clients)

    @classmethod
    def check(cls, cfg, task, spec) -> None:
        """Raise ConfigError (naming the key) if the run-config cannot work with this task; reads at
        most the data's shape, never the data (``zofl.setup.check_run`` calls it before any run
        starts, e.g. for every cell of a grid). Default: nothing to check."""

    def __init__(self, cfg, task, spec):
        self.cfg, self.task, self.spec = cfg, task, spec
        self.hp = self.Params.of(cfg)  # hp: this method's typed parameters (its Params)
        self.task_cfg = TaskSettings.of(cfg)  # what the task is handed (zofl.settings.TaskSettings)
        self.m = cfg.num_clients
        self.server_data = task.server_data(spec)
        self.test_data = task.test_data(spec)
        self.split_n_train = task.num_train(spec)
        # partition -> N_i reported by its node, which holds data of its own (zofl.tasks.local; the live
        # nodes.Federation.sizes, set by the ServerApp once it has learned the federation)
        self.reported_sizes: Mapping[int, int] = {}

    @property
    def n_train(self) -> int:
        """N_train of rho_i = N_i / N_train: the server's examples plus every client's, each client's as its node
        reported it when it holds data of its own, else its partition's size in the run's split (the paper's known
        N: with data that stay on the nodes, the sum of what they report stands in for it)."""
        if self.cfg.server_data == "none":  # no split on the server: the clients' reports are all it knows
            return sum(self.reported_sizes.values())
        if not self.reported_sizes:
            return self.split_n_train
        return self.split_n_train + sum(n - len(self.task.client_data(self.spec, i))
                                        for i, n in self.reported_sizes.items())

    # -- aggregation ----------------------------------------------------------------------
    @property
    def robust(self) -> Callable[[list[np.ndarray]], np.ndarray] | None:
        """The one idiom of robust aggregation: the run-config's robust rule (``aggregation`` median, trimmed-mean or
        krum: ``zofl.algorithms.robust``) as a function of the client vectors, or None for the papers' mean, which
        each method computes as its paper does (weighted, stored, ...): ``mean(...) if self.robust is None else
        self.robust(vectors)``."""
        if self.cfg.aggregation == "mean":
            return None
        rule = Robust.of(self.cfg)
        return lambda vectors: combine_with(rule, vectors)

    def server_step(self, state: State, delta: np.ndarray, lr: float, t: int, count: int = 1) -> State:
        """The state after the server step x + lr delta / count (the method's own step: ``server-optimizer`` sgd) or
        that step through the run's server optimizer (FedAvgM, FedAdagrad, FedAdam, FedYogi:
        ``zofl.algorithms.server_opt``), with its moments; ``t`` the 1-based step. A method whose server step is a
        (pseudo-)gradient step calls it, and lists ``ServerOptimizer`` among its Params' groups."""
        hp = self.hp
        moments = {k: state[k] for k in OPT_STATE if k in state}
        if isinstance(hp, ServerOptimizer):
            x, opt = server_step(self.server_optimizer, state["x"], delta, lr, t, moments, hp.server_momentum,
                                 hp.server_beta1, hp.server_beta2, hp.server_tau, count)
        else:  # a method with a fixed optimizer (fedavgm: its Params hold ServerMomentum only)
            momentum = hp.server_momentum if isinstance(hp, ServerMomentum) else 0.0
            x, opt = server_step(self.server_optimizer, state["x"], delta, lr, t, moments, momentum, count=count)
        return {**state, "x": x, **opt}

    @property
    def server_optimizer(self) -> str:
        """The optimizer of ``server_step``: the run-config's server-optimizer where the method reads it, else the
        method's own (a class attribute: FedAvgM's "momentum"), else "sgd"."""
        return self.hp.server_optimizer if isinstance(self.hp, ServerOptimizer) else "sgd"

    @property
    def clips_coefficients(self) -> bool:
        """Whether run-config coef-clip acts in this run (the summary names it as the run's defence): only where a
        method clips coefficients with it (ZO-HFL's two-point estimate)."""
        return False

    # -- state ----------------------------------------------------------------------------
    def init(self) -> State:
        """The state before round 1: x_0 (the task's initial parameters, or those pre-trained)."""
        x0 = np.asarray(self.task.init_params(self.test_data.x.shape[1], self.test_data.num_classes),
                        dtype=np.float64)
        if self.cfg.x0 == "pretrained" and len(self.server_data):
            x0 = pretrain(self.task, x0, self.server_data, self.cfg.x0_epochs, self.cfg.x0_lr,
                          self.cfg.batch_size, self.cfg.seed)
        return {"x": x0, **init_state(self.server_optimizer, x0.size)}  # a server optimizer's moments (server_step)

    def state_dict(self, state: State) -> dict[str, np.ndarray]:
        """What a checkpoint stores (arrays only)."""
        return dict(state)

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> State:
        return dict(arrays)

    # -- a synchronous round ---------------------------------------------------------------
    def communication_rounds(self) -> int:
        """How many communication rounds the run takes (``num-rounds``, unless there are inner rounds)."""
        return self.cfg.num_rounds

    def round_H(self, state: State, r: int) -> int:
        """H_{i,r} = ceil(tau sqrt(r + 1)), or the fixed ``local-steps``."""
        return local_steps(r, self.cfg.tau, self.cfg.local_steps)

    def downlink(self, state: State, r: int, pid: int) -> dict[str, np.ndarray]:
        """The arrays sent to client ``pid`` in round r (default: the global model x)."""
        return {"x": state["x"]}

    def round_config(self, state: State, r: int) -> dict[str, Any]:
        """Config entries of round r besides ``round`` and ``H`` (e.g. FedRZO_bl's phase)."""
        return {}

    def plan(self, state: State, r: int, sampled: list[int], stragglers: list[int]) -> list[Work]:
        """The work of every sampled client; a straggler gets H = 0."""
        H = self.round_H(state, r)
        config = self.round_config(state, r)
        return [Work(pid, r, 0 if pid in stragglers else H, self.downlink(state, r, pid), dict(config))
                for pid in sampled]

    def reply_shapes(self, state: State, r: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def update(self, state: State, plan: RoundPlan, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        """The state after round ``plan.r`` from the checked replies (sorted by client id), and record fields;
        ``plan`` says whom the round asked for what (e.g. which clients were sent H = 0)."""
        raise NotImplementedError

    # -- an asynchronous method (asynchronous = True) ----------------------------------------
    def buffer_size(self) -> int:
        """Replies per server update (``buffer-size``)."""
        return self.cfg.buffer_size

    def ready(self, state: State, replies: list[Reply]) -> bool:
        """Whether the buffered replies make the next update (default: ``buffer_size`` of them)."""
        return len(replies) >= self.buffer_size()

    def receive(self, state: State, reply: Reply, staleness: int) -> State:
        """The state once ``reply`` has arrived, before any update (AFBO stores it; default: unchanged)."""
        return state

    def counts(self, state: State, reply: Reply) -> bool:
        """Whether ``reply`` counts toward the next update (with one_task_per_version its client then waits)."""
        return True

    def task_reply_shapes(self, state: State, work: Work) -> dict[str, tuple[int, ...]]:
        """The reply shapes expected for ``work`` (methods with tasks of several kinds override it)."""
        return self.reply_shapes(state, work.round)

    # -- records ----------------------------------------------------------------------------
    def metrics(self, state: State) -> dict[str, Any]:
        """Test accuracy and loss of x, and f1 (the loss on the server's data), for the round record."""
        return model_metrics(self.task, state["x"], self.test_data, self.server_data)

    def summary_extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {}
