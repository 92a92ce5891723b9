"""The synchronous engine on Flower's Message API (``engine = "sync"``, the default).

``MessageStrategy`` is a ``flwr.serverapp.strategy.Strategy`` whose rounds are a ``SyncRun``'s:
``configure_train`` turns the run's plan (S_r and each sampled client's ``Work``) into one
``train`` message per sampled client; ``aggregate_train`` decodes the replies (errors become
failures), and ``SyncRun.complete`` checks them, applies the method's ``update``, evaluates and
writes the round record. Flower's own ``Strategy.start`` drives the loop and the round deadline
(its ``timeout``), on a ``DeadlineGrid`` that keeps the messages unanswered at the deadline: the
replies that come after are classified at the next round (queued behind other work, a slow client,
or an error) and never used. Evaluation is centralised, so ``configure_evaluate`` sends nothing.
"""
from __future__ import annotations

import logging
from typing import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..core.rounds import RoundPlan, SyncRun
from .deadline import DeadlineGrid
from .wire import array_record, decode_replies, decode_reply, work_messages

log = logging.getLogger("zofl")


class MessageStrategy(Strategy):
    """A method's synchronous rounds as a Message-API strategy (see the module docstring)."""

    def __init__(self, run: SyncRun, fed):
        self.run, self.fed = run, fed  # fed: nodes.Federation, the server's map client id i -> node id
        self.nodes = fed.nodes
        self.plan: RoundPlan | None = None
        self.grid: DeadlineGrid | None = None  # set by serve

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if isinstance(grid, DeadlineGrid):  # replies to earlier rounds that came after their deadline
            self.run.note_late([decode_reply(m, self.fed.partition_of(n)) for n, m in grid.late_replies()])
        self.fed.refresh(grid, self.run.cfg.num_clients)  # a restarted SuperNode takes its partition back
        self.run.set_federation(self.fed)
        self.plan = self.run.plan(self.run.round_of(server_round))
        return work_messages(self.plan.works, self.nodes)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord, MetricRecord | None]:
        good, bad = decode_replies(replies, self.fed.partition_of,
                                   self.grid.node_of if self.grid is not None else None)
        # a client that neither replied nor raised missed the deadline: SyncRun counts it as dropped
        self.run.complete(self.plan, good, bad)
        return array_record({"x": self.run.x}), None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # evaluation is centralised (SyncRun.complete)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def recorded(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's server-side evaluation (``evaluate_fn`` of ``Strategy.start``): the test metrics the round's
        record already holds (``Method.metrics``, computed once), so that Flower's log and its "Final results"
        show them."""
        return recorded_metrics(self.run)

    def summary(self) -> None:
        log.info("%s: %s, rounds %d..%d", type(self).__name__, self.run.method.title, self.run.offset + 1,
                 self.run.total)

    def serve(self, grid: Grid) -> None:
        """Run the remaining rounds through Flower's ``Strategy.start``."""
        self.grid = DeadlineGrid(grid)
        self.start(self.grid, array_record({"x": self.run.x}), num_rounds=len(self.run.pending_rounds()),
                   timeout=self.run.cfg.round_deadline_s or None, evaluate_fn=self.recorded)


def recorded_metrics(run) -> MetricRecord | None:
    """The newest record's test accuracy and loss (those it has: a NaN is written as null)."""
    rec = run.writer.records[-1] if run.writer.records else {}
    metrics = {k: float(rec[k]) for k in ("test_acc", "test_loss") if rec.get(k) is not None}
    return MetricRecord(metrics) if metrics else None
