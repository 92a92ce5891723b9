"""Flower's own FedAvg strategy driving our FedAvg clients: the peer cross-check for ``fedavg``.

The same clients, data, x_0 and seed, but Flower's client sampling (``fraction`` = beta, its own
unseeded random choice: runs with beta < 1 are not reproducible; with beta = 1 they are) and
Flower's weighted averaging: ``flwr.serverapp.strategy.FedAvg`` on the Message API (engine sync),
``flwr.server.strategy.FedAvg`` on the legacy API (engine legacy). Bad replies (``reply_problem``)
are dropped before Flower averages, replies are handed to it sorted by client id (the sum's
order, so every engine gives the same bits), and the records come from the same ``SyncRun`` as
every other strategy; the record's ``sampled`` are the clients that replied and those whose error reply names
them (Flower does not say whom it sampled; a client that never answers is unknown to the strategy on the Message
API). On either API Flower's FedAvg samples clients, not SuperNodes (``ClientsGrid``, ``legacy.ClientsOfNodes``),
and every message names its client, so a simulated SuperNode may serve several (clients-per-node).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import FedAvg as MessageFedAvg

from ..algorithms.lower_level import local_steps
from ..core.protocol import ARRAYS, CONFIG, Failure, Reply
from ..core.rounds import RoundPlan, SyncRun
from .legacy import ClientsOfNodes, LegacyStrategy, failures_of
from .message import MessageStrategy
from .wire import APP_CLIENT_ID, array_record, decode_reply, reply_from_numpy


def _plan(run: SyncRun, r: int, replies: Iterable[Reply], failures: Iterable[Failure], downlink: int) -> RoundPlan:
    """Round r's plan as Flower's FedAvg made it: its sample is what the strategy knows of it, the clients that
    replied and those whose failure names them (a client that never answers is unknown to the strategy)."""
    sampled = {rep.pid for rep in replies} | {f.pid for f in failures if f.pid is not None}
    return RoundPlan(r, sorted(sampled), [], [], local_steps(r, run.cfg.tau, run.cfg.local_steps),
                     downlink_bytes=downlink)


class ClientsGrid:
    """What Flower's Message-API FedAvg samples from, made the run's clients: ``get_node_ids`` lists the id of each
    held client whose SuperNode is connected (it is asked again at every call, as Flower asks a Grid). Flower's
    FedAvg then addresses its messages to client ids, which ``FlowerFedAvg.configure_train`` sends to their nodes,
    naming the client (``APP_CLIENT_ID``), so a simulated SuperNode may serve several clients (clients-per-node)."""

    def __init__(self, grid, fed):  # fed: nodes.Federation
        self.grid, self.fed = grid, fed

    def get_node_ids(self) -> list[int]:
        online = set(self.grid.get_node_ids())
        return [pid for pid, node in sorted(self.fed.nodes.items()) if node in online]


def to_client_nodes(messages: Iterable[Message], nodes: Mapping[int, int]) -> list[Message]:
    """Flower's messages addressed to client ids (``ClientsGrid``), each sent to its client's node instead, its config
    naming the client (one config per message; the arrays stay shared)."""
    out = []
    for msg in messages:
        pid, content = msg.metadata.dst_node_id, msg.content
        config = ConfigRecord({**content.config_records[CONFIG], APP_CLIENT_ID: int(pid)})
        out.append(Message(RecordDict({ARRAYS: content.array_records[ARRAYS], CONFIG: config}),
                           dst_node_id=nodes[pid], message_type=msg.metadata.message_type))
    return out


class FlowerFedAvg(MessageFedAvg):
    """Flower's Message-API FedAvg with our records, sampling clients (``ClientsGrid``)."""

    def __init__(self, run: SyncRun, fed):  # fed: nodes.Federation
        cfg = run.cfg
        super().__init__(fraction_train=cfg.beta, fraction_evaluate=0.0, min_train_nodes=1, min_evaluate_nodes=0,
                         min_available_nodes=cfg.num_clients)
        self.run, self.fed = run, fed

    def configure_train(self, server_round, arrays, config, grid):
        r = self.run.round_of(server_round)
        config["round"], config["H"] = r, local_steps(r, self.run.cfg.tau, self.run.cfg.local_steps)
        self.t_r = r
        msgs = to_client_nodes(super().configure_train(server_round, array_record({"x": self.run.x}), config,
                                                       ClientsGrid(grid, self.fed)), self.fed.nodes)
        self.downlink = self.run.x.nbytes * len(msgs)
        return msgs

    def aggregate_train(self, server_round, replies):
        by_pid, replies_, failures = {}, [], []
        for msg in replies:
            pid = self.client_of(msg)
            out = decode_reply(msg, pid)
            if isinstance(out, Failure):
                failures.append(out)
            else:
                replies_.append(out)
                by_pid[pid] = msg
        plan = _plan(self.run, self.t_r, replies_, failures, self.downlink)

        def aggregate(state, round_plan, used):
            if not used:
                return state, {}
            arrays, _ = MessageFedAvg.aggregate_train(self, server_round, [by_pid[rep.pid] for rep in used])
            return {**state, "x": np.array(arrays["x"].numpy())}, {}  # a fresh, aligned copy

        self.run.complete(plan, replies_, failures, aggregate)
        return array_record({"x": self.run.x}), None

    configure_evaluate = MessageStrategy.configure_evaluate
    aggregate_evaluate = MessageStrategy.aggregate_evaluate
    client_of = MessageStrategy.client_of
    serve = MessageStrategy.serve
    recorded = MessageStrategy.recorded


class LegacyFlowerFedAvg(LegacyFedAvg):
    """Flower's legacy-API FedAvg with our records."""

    def __init__(self, run: SyncRun, fed):  # fed: nodes.Federation
        cfg = run.cfg
        super().__init__(fraction_fit=cfg.beta, fraction_evaluate=0.0, min_fit_clients=1, min_evaluate_clients=0,
                         min_available_clients=cfg.num_clients, accept_failures=True)
        self.run, self.fed = run, fed

    initialize_parameters = LegacyStrategy.initialize_parameters
    evaluate = LegacyStrategy.evaluate
    configure_evaluate = LegacyStrategy.configure_evaluate
    aggregate_evaluate = LegacyStrategy.aggregate_evaluate

    def configure_fit(self, server_round, parameters, client_manager):
        r = self.run.round_of(server_round)
        self.t_r = r
        config = {"round": r, "H": local_steps(r, self.run.cfg.tau, self.run.cfg.local_steps)}
        ins = super().configure_fit(server_round, parameters, ClientsOfNodes(self.fed, client_manager))
        self.downlink = self.run.x.nbytes * len(ins)
        return [(proxy, FitIns(fit.parameters, config)) for proxy, fit in ins]

    def aggregate_fit(self, server_round, results, failures):
        by_pid, replies = {}, []
        for proxy, res in results:
            pid = proxy.pid
            replies.append(reply_from_numpy(pid, parameters_to_ndarrays(res.parameters), res.num_examples, res.metrics))
            by_pid[pid] = (proxy, res)
        fails = failures_of(failures)  # each names its client (``legacy.ClientOnNode``), as on the Message API
        plan = _plan(self.run, self.t_r, replies, fails, self.downlink)

        def aggregate(state, round_plan, used):
            if not used:
                return state, {}
            params, _ = LegacyFedAvg.aggregate_fit(self, server_round, [by_pid[rep.pid] for rep in used], [])
            return {**state, "x": parameters_to_ndarrays(params)[0]}, {}

        self.run.complete(plan, replies, fails, aggregate)
        return ndarrays_to_parameters([self.run.x]), {}
