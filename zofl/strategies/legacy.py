"""The synchronous engine on Flower's legacy API (``engine = "legacy"``), as the user named it:
a ``flwr.server.strategy.Strategy`` subclass, run from the ServerApp's ``@app.main()`` with
``flwr.server.compat.start_grid``. It drives the same ``SyncRun`` as the Message-API engine, and
the clients are the same ``NumPyClient``, so the numbers are the same bit for bit.

Flower deprecated this API in 1.21 (``flwr.compat``, "deprecated legacy components"); it sends one
message per client and waits for each, which costs about 0.1 s per client per round in the
simulation (docs/benchmark-engines.md).

Flower's legacy server addresses a ``ClientProxy``, one per SuperNode as Flower makes them. Ours address a client
(``ClientOnNode``: the client's SuperNode, the client id in the config of every FitIns and EvaluateIns), so a
simulated SuperNode may serve several clients (run-config clients-per-node, ``zofl.core.shares``) and every reply
and failure is read as the client the proxy names: an exception is raised as ``ClientFailed`` naming it, since
Flower's legacy server keeps a raising client's exception without its proxy.
"""
from __future__ import annotations

from flwr.common import EvaluateIns, FitIns, Parameters, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import ServerConfig
from flwr.server.client_manager import ClientManager, SimpleClientManager
from flwr.server.compat import start_grid
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import Strategy as LegacyAPIStrategy
from flwr.serverapp import Grid

from ..core.protocol import EVAL_ACC, Failure
from ..core.rounds import RoundPlan, SyncRun
from ..core.shares import num_nodes
from .message import aggregate_answers, recorded_metrics
from .wire import APP_CLIENT_ID, error_kind, eval_answer, reply_from_numpy, work_to_numpy


class ClientFailed(Exception):
    """What a ``ClientOnNode`` raises when its client's work fails: the client id and the exception it raised."""

    def __init__(self, pid: int, error: BaseException):
        super().__init__(pid, error)
        self.pid, self.error = pid, error


class ClientOnNode(GridClientProxy):
    """One client of a SuperNode as Flower's legacy ``ClientProxy``: its FitIns and EvaluateIns go to the node with
    the client id in their config (``APP_CLIENT_ID``, as every Message-API message names its client); ``cid`` is the
    client id (as in Flower's earlier simulation, where a proxy's cid was its partition)."""

    def __init__(self, node: GridClientProxy, pid: int):
        super().__init__(node.node_id, node.grid, node.run_id)
        self.pid, self.cid = pid, str(pid)

    def fit(self, ins: FitIns, timeout, group_id):
        try:
            return super().fit(FitIns(ins.parameters, {**ins.config, APP_CLIENT_ID: self.pid}), timeout, group_id)
        except Exception as exc:  # Flower's legacy server would keep the exception alone, naming nobody
            raise ClientFailed(self.pid, exc) from exc

    def evaluate(self, ins: EvaluateIns, timeout, group_id):
        try:
            return super().evaluate(EvaluateIns(ins.parameters, {**ins.config, APP_CLIENT_ID: self.pid}), timeout,
                                    group_id)
        except Exception as exc:
            raise ClientFailed(self.pid, exc) from exc


def client_proxies(fed, client_manager: ClientManager, clients) -> dict[int, ClientOnNode]:
    """{client id: its proxy} for each of ``clients`` whose SuperNode is connected (Flower's client manager still
    holds its proxy); the others' nodes have left (lost clients)."""
    nodes = client_manager.all()
    return {pid: ClientOnNode(nodes[str(fed.nodes[pid])], pid) for pid in clients
            if pid in fed.nodes and str(fed.nodes[pid]) in nodes}


class ClientsOfNodes(SimpleClientManager):
    """Flower's client manager over clients instead of SuperNodes, for Flower's own legacy FedAvg to sample from: a
    ``ClientOnNode`` per client whose node Flower's manager (``nodes``) holds, renewed whenever it is waited on."""

    def __init__(self, fed, nodes: ClientManager):
        super().__init__()
        self.fed, self.nodes = fed, nodes
        self.renew()

    def renew(self) -> None:
        self.clients = {str(pid): p for pid, p in client_proxies(self.fed, self.nodes, sorted(self.fed.nodes)).items()}

    def wait_for(self, num_clients: int, timeout: int = 86400) -> bool:
        """Flower's wait for ``num_clients`` clients is a wait for the SuperNodes that serve them."""
        self.nodes.wait_for(num_nodes(num_clients, self.fed.k), timeout)
        self.renew()
        return len(self.clients) >= num_clients


def describe(failure) -> tuple[int | None, str]:
    """(the client, why) of a failure in Flower's legacy form: an exception (``ClientFailed`` names its client; any
    other names none) or a (proxy, result) whose status is not OK."""
    if isinstance(failure, ClientFailed):
        return failure.pid, f"{type(failure.error).__name__}: {failure.error}"
    if isinstance(failure, BaseException):
        return None, f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return proxy.pid, f"status {res.status.code.name}: {res.status.message}"


def failures_of(failures) -> list[Failure]:
    """Flower's legacy failures as ours, each naming the client its proxy named (or nobody)."""
    out = []
    for f in failures:
        pid, why = describe(f)
        out.append(Failure(pid, why, error_kind(None, why)))
    return out


class LegacyStrategy(LegacyAPIStrategy):
    """A method's synchronous rounds as a legacy-API strategy (a ``ClientOnNode`` per sampled client)."""

    def __init__(self, run: SyncRun, fed):  # fed: nodes.Federation
        super().__init__()
        self.run, self.fed, self.nodes = run, fed, fed.nodes
        self.plan: RoundPlan | None = None
        self.grid: Grid | None = None  # set by serve_legacy: the federation is refreshed between rounds

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        return ndarrays_to_parameters([self.run.x])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        if self.grid is not None:  # a restarted SuperNode takes its partition back
            self.fed.refresh(self.grid, self.run.cfg.num_clients)
        self.run.set_federation(self.fed)
        self.plan = self.run.plan(self.run.round_of(server_round))
        proxies = client_proxies(self.fed, client_manager, [w.pid for w in self.plan.works])
        out, works = [], []
        for w in self.plan.works:
            proxy = proxies.get(w.pid)
            if proxy is None:  # its SuperNode left (Flower's client manager dropped it): a lost client
                self.plan.unreachable.append(w.pid)
                continue
            arrays, config = work_to_numpy(w)
            out.append((proxy, FitIns(ndarrays_to_parameters(arrays), config)))
            works.append(w)
        self.plan.works = works
        if not out:  # Flower's legacy server skips aggregate_fit for a round that contacts nobody: the round is
            self.run.complete(self.plan, [], [])  # ours still (a server-only control; every sampled client lost)
        return out

    def aggregate_fit(self, server_round: int, results, failures):
        replies = [reply_from_numpy(proxy.pid, parameters_to_ndarrays(res.parameters), res.num_examples, res.metrics)
                   for proxy, res in results]
        self.run.complete(self.plan, replies, failures_of(failures))
        return ndarrays_to_parameters([self.run.x]), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        """Federated evaluation (run-config federated-eval, every eval-every rounds): x_r to every held partition's
        client, in Flower's EvaluateIns; other rounds none (the server's own evaluation is in SyncRun.complete)."""
        if self.run.deferred is None:
            return []
        ins = EvaluateIns(ndarrays_to_parameters([self.run.x]), {"round": self.run.deferred[0]})
        return [(proxy, ins) for _, proxy in sorted(client_proxies(self.fed, client_manager, self.fed.nodes).items())]

    def aggregate_evaluate(self, server_round, results, failures):
        """The clients' answers (EvaluateRes: loss, num_examples, eval_acc), checked and weighted by examples, into
        the round's record; a client that failed (in ``failures``) counts as refused."""
        replies = [(proxy.pid, res) for proxy, res in results]
        metrics = aggregate_answers(self.run, self.fed, replies, lambda res, pid: eval_answer(
            pid, res.num_examples, res.loss, res.metrics.get(EVAL_ACC)))
        if metrics is None:
            return None, {}
        return metrics.get("fed_loss"), dict(metrics)

    def evaluate(self, server_round, parameters):
        """Flower's centralised evaluation: the test loss and accuracy the round's record already holds (the
        record is written by SyncRun.complete), for Flower's History and its summary."""
        metrics = recorded_metrics(self.run)
        if metrics is None or "test_loss" not in metrics:
            return None
        return float(metrics["test_loss"]), {k: float(v) for k, v in metrics.items() if k != "test_loss"}


def serve_legacy(grid: Grid, strategy: LegacyAPIStrategy, num_rounds: int, deadline_s: float) -> None:
    strategy.grid = grid
    start_grid(grid=grid, strategy=strategy,
               config=ServerConfig(num_rounds=num_rounds, round_timeout=deadline_s or None))
