"""The ClientApp: one NumPyClient that runs the configured strategy's client work on its partition."""
from __future__ import annotations

import time

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.common import Array, ArrayRecord, Context

from .config import ConfigError
from .faults import InjectedCrash, corrupt, draw_fault, slowdown_s, speed_factor
from .setup import prepare
from .strategies import STRATEGIES
from .strategies.base import not_sampled

STATE_KEY = "zofl"


def load_state(context: Context) -> dict[str, np.ndarray]:
    """The client's arrays kept across rounds (e.g. SCAFFOLD's control variate) from its Context."""
    rec = context.state.array_records.get(STATE_KEY)
    return {k: v.numpy() for k, v in rec.items()} if rec is not None else {}


def save_state(context: Context, state: dict[str, np.ndarray]) -> None:
    if state:
        context.state.array_records[STATE_KEY] = ArrayRecord({k: Array(v) for k, v in state.items()})


class ZOFLClient(NumPyClient):
    """Thin adapter: Flower in, ``STRATEGIES[strategy].client_fit`` (pure numpy) out.

    Flower rebuilds the client every round; what must persist lives in ``context.state``. It also
    applies the device speed and the injected faults of ``zofl.faults`` (docs/robustness.md).
    """

    def __init__(self, context: Context):
        self.context = context
        self.cfg, self.task, self.spec = prepare(context.run_config)
        node = context.node_config
        self.pid = int(node.get("partition-id", 0))
        num_partitions = int(node.get("num-partitions", self.cfg.num_clients))
        if num_partitions != self.cfg.num_clients or not 0 <= self.pid < num_partitions:
            raise ConfigError(f"this SuperNode has partition-id={self.pid}, num-partitions={num_partitions}, but "
                              f"run-config num-clients={self.cfg.num_clients}: they must agree")
        self.fit_fn = STRATEGIES[self.cfg.strategy].client_fit
        self.speed = speed_factor(self.cfg.seed, self.pid, self.cfg.speed_profile, self.cfg.speed_param)

    def fit(self, parameters, config):
        if not_sampled(self.pid, config):  # outside S_r (only in round 1, see RoundStrategy): no work
            return [], 0, {"pid": self.pid, "sampled": False}
        cfg = self.cfg
        fault = draw_fault(cfg.seed, int(config["round"]), self.pid, cfg.crash_prob, cfg.hang_prob, cfg.corrupt_prob)
        if fault == "crash":
            raise InjectedCrash(f"client {self.pid}: injected crash in round {config['round']} (crash-prob)")
        t0 = time.perf_counter()
        state = load_state(self.context)
        arrays, num_examples, metrics = self.fit_fn(cfg, self.task, self.spec, self.pid, parameters, config, state)
        save_state(self.context, state)
        # device speed: wall time = (compute + steps * step-time-s) / s_i
        wait = slowdown_s(time.perf_counter() - t0, int(metrics.get("steps", 0)), self.speed, cfg.step_time_s)
        if fault == "hang":
            wait += cfg.hang_s
        if wait > 0:
            time.sleep(wait)
        if fault is not None and fault.startswith("corrupt:"):
            arrays = corrupt(arrays, fault.split(":", 1)[1])
        metrics = {**metrics, "speed": self.speed, "wall_s": time.perf_counter() - t0}
        return arrays, num_examples, metrics


def client_fn(context: Context):
    return ZOFLClient(context).to_client()


app = ClientApp(client_fn=client_fn)
