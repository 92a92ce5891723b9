"""The synchronous engine on Flower's Message API (``engine = "sync"``, the default).

``MessageStrategy`` is a ``flwr.serverapp.strategy.Strategy`` whose rounds are a ``SyncRun``'s:
``configure_train`` turns the run's plan (S_r and each sampled client's ``Work``) into one
``train`` message per sampled client; ``aggregate_train`` decodes the replies (errors become
failures), and ``SyncRun.complete`` checks them, applies the method's ``update``, evaluates and
writes the round record. Flower's own ``Strategy.start`` drives the loop and the round deadline
(its ``timeout``), on a ``DeadlineGrid`` that keeps the messages unanswered at the deadline: the
replies that come after are classified at the next round (queued behind other work, a slow client,
or an error) and never used. The server evaluates x_r itself (``SyncRun.complete``); with run-config
federated-eval, every eval-every rounds ``configure_evaluate`` also sends x_r to every client in Flower's
``evaluate`` messages and ``aggregate_evaluate`` writes the round's record with their answers weighted by examples
(``zofl.core.evaluation``).
"""
from __future__ import annotations

import logging
from typing import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..core.evaluation import EvalAnswer
from ..core.rounds import RoundPlan, SyncRun
from .deadline import DeadlineGrid
from .wire import array_record, decode_eval, decode_replies, decode_reply, eval_messages, work_messages

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
            self.run.note_late([decode_reply(m, pid) for pid, m in grid.late_replies()])
        self.fed.refresh(grid, self.run.cfg.num_clients)  # a restarted SuperNode takes its partition back
        self.run.set_federation(self.fed)
        self.plan = self.run.plan(self.run.round_of(server_round))
        return work_messages(self.plan.works, self.nodes)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord, MetricRecord | None]:
        good, bad = decode_replies(replies, self.client_of)
        # a client that neither replied nor raised missed the deadline: SyncRun counts it as dropped
        self.run.complete(self.plan, good, bad)
        return array_record({"x": self.run.x}), None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Federated evaluation (run-config federated-eval, every eval-every rounds): x_r to every held partition's
        node; other rounds nothing (the server's own evaluation is in SyncRun.complete)."""
        return evaluate_messages(self.run, self.fed)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The clients' answers, checked and weighted by examples, into the round's record (which waited for them)."""
        return aggregate_answers(self.run, self.fed, [(self.client_of(m), m) for m in replies], decode_eval)

    def client_of(self, reply: Message) -> int:
        """The client a reply is about (the one its message named: ``DeadlineGrid.client_of``); without the
        DeadlineGrid (Flower's ``start`` driven directly on another Grid) the one its sender serves alone."""
        if self.grid is not None:
            return self.grid.client_of(reply)
        return self.fed.partition_of(reply.metadata.src_node_id)

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
    """The newest round's test accuracy and loss (those it has: a NaN is written as null), written or waiting for
    the clients' evaluation."""
    rec = run.latest_metrics()
    metrics = {k: float(rec[k]) for k in ("test_acc", "test_loss") if rec.get(k) is not None and rec[k] == rec[k]}
    return MetricRecord(metrics) if metrics else None


def evaluate_messages(run, fed) -> list[Message]:
    """The round's ``evaluate`` messages when its record waits for a federated evaluation (``SyncRun.deferred``)."""
    return [] if run.deferred is None else eval_messages(run.x, run.deferred[0], fed.nodes)


def checked_answers(fed, k: int, replies: list[tuple[int, object]], decode) -> tuple[list[EvalAnswer], int]:
    """``replies`` [(client id, reply)] to round (version) ``k``'s evaluation (the client each message named),
    decoded by ``decode(reply, pid)`` (an EvalAnswer or why not): the answers of the clients a node serves now, each
    once, sorted by client; and how many of the served clients gave none usable (refused alone, logged; or no
    answer in time)."""
    answers: dict[int, EvalAnswer] = {}
    refused = 0
    for pid, reply in replies:
        out = decode(reply, pid) if pid in fed.nodes else "not a client a node of this run serves"
        if isinstance(out, str) or pid in answers:
            refused += 1
            log.warning("round %d: federated evaluation: the answer for client %s is refused: %s", k, pid,
                        out if isinstance(out, str) else "a second answer")
            continue
        answers[pid] = out
    missing = max(0, len(fed.nodes) - len(replies))  # no answer in time (the legacy API: its failures too)
    return [answers[p] for p in sorted(answers)], refused + missing


def aggregate_answers(run, fed, replies: list[tuple[int, object]], decode) -> MetricRecord | None:
    """The round's record, which waits for the clients' evaluation, written with their checked answers
    (``checked_answers``) weighted by examples; Flower's MetricRecord of them, for its log and History."""
    if run.deferred is None:
        return None
    record = run.complete_evaluation(*checked_answers(fed, run.deferred[0], replies, decode))
    fed_metrics = {f: float(record[f]) for f in ("fed_loss", "fed_acc") if record and record.get(f) is not None}
    return MetricRecord(fed_metrics) if fed_metrics else None
