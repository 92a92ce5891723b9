"""The asynchronous engine on Flower's Message API (``engine = "async"``).

Flower ships no asynchronous strategy (its issue #469 is open); this one uses the Grid's
``push_messages`` / ``pull_messages`` directly: ``GridTransport`` sends one ``train`` message per
task to the client's node and collects replies as they arrive, and ``AsyncStrategy.start`` runs
the Flower-free ``zofl.core.asynchronous.AsyncRun`` over it (the event loop, the clock, staleness,
records and checkpoints live there). ``configure_train`` / ``aggregate_train`` express one task
and one reply, for readers who know Flower's synchronous strategies. With run-config federated-eval, every
eval-every versions the server sends x_v to every client in Flower's ``evaluate`` messages and waits for the
answers (``evaluate_clients``, through ``configure_evaluate`` / ``aggregate_evaluate``'s checks) before the
update's record is written.
"""
from __future__ import annotations

import logging
import time
from typing import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..core.asynchronous import AsyncRun
from ..core.evaluation import EvalAnswer
from ..core.protocol import Failure, Reply, Work
from .message import checked_answers
from .wire import array_record, client_of_message, decode_eval, decode_reply, eval_messages, work_message

log = logging.getLogger("zofl")


class GridTransport:
    """Tasks as messages on a Flower Grid; replies in arrival order."""

    def __init__(self, grid: Grid, nodes: dict[int, int], poll_s: float = 0.005, address=None):
        self.grid, self.nodes, self.poll_s = grid, nodes, poll_s
        self.pid_of: dict[str, int] = {}  # message id -> client id
        self.address = address  # address(msg, pid): a user's App's entries on each message (strategies.app)

    def submit(self, work: Work) -> str:
        msg = work_message(work, self.nodes[work.pid])
        if self.address is not None:
            self.address(msg, work.pid)
        (mid,) = self.grid.push_messages([msg])
        self.pid_of[mid] = work.pid
        return mid

    def poll(self) -> list[tuple[str, Reply | Failure]]:
        if not self.pid_of:
            return []
        out = []
        for msg in self.grid.pull_messages(list(self.pid_of)):
            mid = msg.metadata.reply_to_message_id
            out.append((mid, decode_reply(msg, self.pid_of.pop(mid))))
        return out

    def wait(self, seconds: float) -> None:
        """Until a reply may have come: a grid that can say so (the in-process Grid) is asked, any other polled."""
        if hasattr(self.grid, "wait_any"):
            self.grid.wait_any(list(self.pid_of), max(seconds, self.poll_s))
        else:
            time.sleep(max(seconds, self.poll_s))


class AsyncStrategy(Strategy):
    """A Message-API strategy whose ``start`` applies updates as replies arrive (``AsyncRun``)."""

    def __init__(self, cfg, method, writer, fed):
        self.cfg, self.method, self.writer, self.fed = cfg, method, writer, fed  # fed: nodes.Federation
        self.nodes = fed.nodes

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """One task for client ``config['pid']`` on the current model (AsyncRun calls plan_task itself)."""
        work = self.method.plan_task({"x": arrays["x"].numpy()}, server_round, int(config["task"]), int(config["pid"]))
        return [work_message(work, self.nodes[work.pid])]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, None]:
        raise NotImplementedError("asynchronous: AsyncRun applies replies one buffer at a time (update_async)")

    def configure_evaluate(self, server_round, arrays, config, grid) -> Iterable[Message]:
        """Federated evaluation of version ``server_round``: x to every held partition's node."""
        return eval_messages(arrays["x"].numpy(), server_round, self.nodes)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Not called: ``evaluate_clients`` checks the answers and ``AsyncRun`` writes them into the update's record."""
        return None

    def evaluate_clients(self, grid: Grid, x, version: int) -> tuple[list[EvalAnswer], int]:
        """The federated evaluation of version ``version`` (every eval-every versions, ``AsyncRun``): the evaluate
        messages pushed, their answers pulled until every one is in or client-wait-s passes, then checked."""
        messages = list(self.configure_evaluate(version, array_record({"x": x}), ConfigRecord(), grid))
        pushed = list(grid.push_messages(messages))
        named = {mid: client_of_message(msg) for mid, msg in zip(pushed, messages)}  # the client each names
        ids = set(pushed)
        replies, end = [], time.monotonic() + self.cfg.client_wait_s
        while ids and time.monotonic() < end:
            got = list(grid.pull_messages(list(ids)))
            ids -= {m.metadata.reply_to_message_id for m in got}
            replies += got
            if ids:
                time.sleep(0.01)
        return checked_answers(self.fed, version, [(named.get(m.metadata.reply_to_message_id, -1), m) for m in replies],
                               decode_eval)

    def summary(self) -> None:
        log.info("AsyncStrategy: %s, buffer %d, clock %s", self.method.title, self.method.buffer_size(),
                 self.cfg.clock)

    def start(self, grid: Grid, *args, **kwargs) -> None:
        self.summary()
        self.async_run = AsyncRun(self.cfg, self.method, self.writer, GridTransport(grid, self.nodes))
        self.async_run.set_federation(self.fed)
        if self.cfg.federated_eval:
            self.async_run.evaluate_clients = lambda x, version: self.evaluate_clients(grid, x, version)
        self.async_run.run()
