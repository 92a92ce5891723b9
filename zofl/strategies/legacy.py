"""The synchronous engine on Flower's legacy API (``engine = "legacy"``), as the user named it:
a ``flwr.server.strategy.Strategy`` subclass, run from the ServerApp's ``@app.main()`` with
``flwr.server.compat.start_grid``. It drives the same ``SyncRun`` as the Message-API engine, and
the clients are the same ``NumPyClient``, so the numbers are the same bit for bit.

Flower deprecated this API in 1.21 (``flwr.compat``, "deprecated legacy components"); it sends one
message per client and waits for each, which costs about 0.1 s per client per round in the
simulation (docs/benchmark-engines.md).
"""
from __future__ import annotations

from flwr.common import EvaluateIns, FitIns, Parameters, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import ServerConfig
from flwr.server.client_manager import ClientManager
from flwr.server.compat import start_grid
from flwr.server.strategy import Strategy as LegacyAPIStrategy
from flwr.serverapp import Grid

from ..core.protocol import EVAL_ACC, Failure
from ..core.rounds import RoundPlan, SyncRun
from .message import aggregate_answers, recorded_metrics
from .wire import error_kind, eval_answer, reply_from_numpy, work_to_numpy


def describe(failure) -> tuple[int | None, str]:
    if isinstance(failure, BaseException):
        return None, f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return proxy.cid, f"status {res.status.code.name}: {res.status.message}"


class LegacyStrategy(LegacyAPIStrategy):
    """A method's synchronous rounds as a legacy-API strategy (ClientProxy cid = node id)."""

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
        clients = client_manager.all()
        out, works = [], []
        for w in self.plan.works:
            proxy = clients.get(str(self.nodes[w.pid]))
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
        replies = [reply_from_numpy(self.fed.partition_of(proxy.cid), parameters_to_ndarrays(res.parameters),
                                    res.num_examples, res.metrics) for proxy, res in results]
        fails = []
        for f in failures:
            cid, why = describe(f)
            fails.append(Failure(None if cid is None else self.fed.partition_of(cid), why, error_kind(None, why)))
        self.run.complete(self.plan, replies, fails)
        return ndarrays_to_parameters([self.run.x]), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        """Federated evaluation (run-config federated-eval, every eval-every rounds): x_r to every held partition's
        client, in Flower's EvaluateIns; other rounds none (the server's own evaluation is in SyncRun.complete)."""
        if self.run.deferred is None:
            return []
        clients = client_manager.all()
        ins = EvaluateIns(ndarrays_to_parameters([self.run.x]), {"round": self.run.deferred[0]})
        return [(clients[str(node)], ins) for _, node in sorted(self.fed.nodes.items()) if str(node) in clients]

    def aggregate_evaluate(self, server_round, results, failures):
        """The clients' answers (EvaluateRes: loss, num_examples, eval_acc), checked and weighted by examples, into
        the round's record; a client that failed (in ``failures``) counts as refused."""
        replies = [(self.fed.partition_of(proxy.cid), res) for proxy, res in results]  # one client per node here
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
