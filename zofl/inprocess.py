"""Run a strategy in one process tree, without Ray, SuperLink or gRPC.

Flower's own round loop (``flwr.server.Server``) drives the same Strategy object, and each
client's ``fit`` runs the same ``ZOFLClient`` code in a pool of ``workers`` processes (or, with
workers = 0, in one thread of this process). This is
the "same computation, same parallelism" reference that benchmarks/bench_zohfl.py compares the
real ``flwr run`` simulation against, and a fast harness for tests of the strategy logic.
"""
from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from flwr.common import (
    Code,
    Context,
    FitIns,
    FitRes,
    RecordDict,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server import Server
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy

from .client_app import ZOFLClient
from .server_app import make_strategy


def _fit(run_config: dict, pid: int, m: int, arrays: list[np.ndarray], config: dict, state: RecordDict):
    """One client's fit in a worker process (its data stay cached there between rounds).

    Like Flower's simulation, the client's Context state travels with the call and comes back."""
    ctx = Context(run_id=0, node_id=pid, node_config={"partition-id": pid, "num-partitions": m},
                  state=state, run_config=run_config)
    return ZOFLClient(ctx).fit(arrays, config), ctx.state


class _PoolProxy(ClientProxy):
    """A ClientProxy whose ``fit`` runs the client in an executor."""

    def __init__(self, pid: int, pool: Executor, run_config: dict, m: int):
        super().__init__(cid=str(10_000 + pid))
        self.pid, self.pool, self.run_config, self.m = pid, pool, run_config, m
        self.state = RecordDict()

    def fit(self, ins: FitIns, timeout, group_id) -> FitRes:
        (arrays, n, metrics), self.state = self.pool.submit(
            _fit, self.run_config, self.pid, self.m, parameters_to_ndarrays(ins.parameters), dict(ins.config),
            self.state).result(timeout)
        return FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), n, metrics)

    def get_properties(self, ins, timeout, group_id):
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def run_inprocess(run_config: Mapping[str, Any], workers: int = 1,
                  start_method: str = "fork") -> tuple[Path, np.ndarray]:
    """Run ``run_config`` in-process with ``workers`` client processes (0 = one thread in this process).

    ``start_method`` "spawn" makes each worker import and load its data itself, as a Ray actor
    does (the fair reference for benchmarks); "fork" shares what this process already loaded.

    Returns (results directory, final global model).
    """
    run_config = dict(run_config)
    cfg, strategy = make_strategy(run_config)
    final: dict[str, Any] = {}
    inner_aggregate = strategy.aggregate_fit

    def aggregate_fit(server_round, results, failures):
        params, metrics = inner_aggregate(server_round, results, failures)
        final["x"] = parameters_to_ndarrays(params)[0]
        return params, metrics

    strategy.aggregate_fit = aggregate_fit
    pool: Executor
    if workers > 0:
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context(start_method))
    else:
        pool = ThreadPoolExecutor(1)
    with pool:
        manager = SimpleClientManager()
        for pid in range(cfg.num_clients):
            manager.register(_PoolProxy(pid, pool, run_config, cfg.num_clients))
        server = Server(client_manager=manager, strategy=strategy)
        server.set_max_workers(max(1, cfg.num_clients))
        server.fit(num_rounds=strategy.rounds_to_run(), timeout=cfg.round_deadline_s or None)
    return strategy.writer.dir, final.get("x")
