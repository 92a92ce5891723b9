"""``Method``: the server half of an algorithm, as a plain object with explicit state.

In the spirit of FedJAX's ``FederatedAlgorithm(init, apply)``: the object holds only what never
changes during a run (config, task, data); everything that does is in the ``State`` passed in
and returned (a dict of numpy arrays with at least ``x``, the global model), so a checkpoint is
``state_dict(state)`` and nothing else. The engines call, per synchronous round r:

    works = method.plan(state, r, sampled, stragglers)     # per-client Work
    ... the clients run ``client_work`` (the method module's client half) ...
    state, fields = method.update(state, r, replies)       # checked replies, sorted by client id

and ``method.metrics(state)`` for the round record. An asynchronous method (``asynchronous =
True``) instead has ``plan_task``, ``task_steps``, ``ready`` and ``update_async``, see
``zofl.methods.fedbuff`` and ``zofl.methods.afbo``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms.lower_level import local_steps
from ..algorithms.robust import combine_with
from ..algorithms.smoothing import seed_sequence
from .evaluation import model_metrics
from .protocol import Reply, Work

State = dict[str, np.ndarray]


def pretrain(task, x: np.ndarray, data, epochs: int, lr: float, batch_size: int, seed: int) -> np.ndarray:
    """x_0 = ``epochs`` epochs of plain SGD on the server's data (x0 = pretrained; our choice)."""
    rng = np.random.default_rng(seed_sequence(seed, 0x0))
    x = x.copy()
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            x -= lr * task.grad(x, data.x[idx], data.y[idx])
    return x


class Method:
    """Shared defaults: x_0, one H for the round, x as the only downlink array, evaluation."""

    name = "base"  # the run-config value of ``strategy``
    title = "base"  # for printed summaries
    bilevel = False  # needs a zofl.tasks.bilevel.BilevelTask
    asynchronous = False  # runs on the async engine (and only there)
    one_task_per_version = False  # async: a client that replied at this version waits for the next
    server_only = False  # a control (zofl.methods.controls): no client is sampled or contacted

    @classmethod
    def check(cls, cfg, task, spec) -> None:
        """Raise ConfigError (naming the key) if the run-config cannot work with this task; reads at
        most the data's shape, never the data (``zofl.setup.check_run`` calls it before any run
        starts, e.g. for every cell of a grid). Default: nothing to check."""

    def __init__(self, cfg, task, spec):
        self.cfg, self.task, self.spec = cfg, task, spec
        self.m = cfg.num_clients
        self.server_data = task.server_data(spec)
        self.test_data = task.test_data(spec)
        self.n_train = task.num_train(spec)

    # -- aggregation ----------------------------------------------------------------------
    def combine(self, vectors: list[np.ndarray]) -> np.ndarray:
        """The run-config's ``aggregation`` of client vectors (``zofl.algorithms.robust``)."""
        return combine_with(self.cfg, vectors)

    @property
    def robust(self):
        """``combine`` when a robust rule is chosen, None for the papers' mean (each method's own code)."""
        return None if self.cfg.aggregation == "mean" else self.combine

    # -- state ----------------------------------------------------------------------------
    def init(self) -> State:
        """The state before round 1: x_0 (the task's initial parameters, or those pre-trained)."""
        x0 = np.asarray(self.task.init_params(self.test_data.x.shape[1], self.test_data.num_classes),
                        dtype=np.float64)
        if self.cfg.x0 == "pretrained" and len(self.server_data):
            x0 = pretrain(self.task, x0, self.server_data, self.cfg.x0_epochs, self.cfg.x0_lr,
                          self.cfg.batch_size, self.cfg.seed)
        return {"x": x0}

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

    def update(self, state: State, r: int, replies: list[Reply]) -> tuple[State, dict[str, Any]]:
        """The state after round r from the checked replies (sorted by client id), and record fields."""
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
