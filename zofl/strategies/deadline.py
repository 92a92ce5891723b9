"""The round deadline of the Message-API engine, remembering who missed it.

Flower's ``Grid.send_and_receive`` pushes a round's messages, pulls replies until all are in or the
timeout passes, and forgets the rest. ``DeadlineGrid`` wraps any Grid (the Ray simulation's, a
deployment's, the in-process one) and runs the same loop, but keeps the ids of the messages still
unanswered at the deadline; ``late_replies()`` pulls the replies to them that came since, so the
server can say why each was late (``zofl.core.policy.late_kind``: queued behind other work, a slow
client, or an error). Everything else is passed to the wrapped Grid unchanged.
"""
from __future__ import annotations

import time
from typing import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

from ..core.protocol import TRAIN
from .wire import client_of_message


class DeadlineGrid(Grid):
    """Flower's Grid whose ``send_and_receive`` keeps the messages that missed the timeout."""

    def __init__(self, grid: Grid, poll_s: float | None = None):
        self.grid = grid
        self.poll_s = poll_s if poll_s is not None else poll_interval(grid)
        self.outstanding: dict[str, int] = {}  # message id -> the client it names, unanswered at its deadline
        self.sent_for: dict[str, int] = {}  # message id -> the client it names, of the last round's messages

    # -- passed through ---------------------------------------------------------------------
    @property
    def run(self):
        return self.grid.run

    def set_run(self, run) -> None:
        self.grid.set_run(run)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    # -- the deadline ---------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Flower's loop (push; pull until every reply is in or ``timeout`` seconds pass); the
        messages unanswered then are kept for ``late_replies``."""
        messages = list(messages)
        ids = list(self.push_messages(messages))
        named = {mid: client_of_message(msg) for mid, msg in zip(ids, messages)}
        self.sent_for = {mid: pid for mid, pid in named.items() if pid is not None}
        waiting, out = set(ids), []
        end = time.time() + (timeout or 0.0)
        while True:
            got = list(self.pull_messages(waiting))
            out += got
            waiting -= {m.metadata.reply_to_message_id for m in got}
            left = end - time.time()
            if not waiting or (timeout is not None and left <= 0):
                break
            wait_for_replies(self.grid, waiting, self.poll_s if timeout is None else min(self.poll_s, left))
        # only train messages are kept (a partition query that timed out is not a client's late reply)
        self.outstanding.update({mid: named[mid] for mid, msg in zip(ids, messages) if mid in waiting
                                 and named[mid] is not None and msg.metadata.message_type.startswith(TRAIN)})
        return out

    def client_of(self, reply: Message) -> int:
        """The client a reply is about: the one the message it answers named (an error reply made by the
        SuperLink, e.g. "node unavailable", is about that client too); -1 for a reply to no message of ours."""
        mid = reply.metadata.reply_to_message_id
        return self.sent_for.get(mid, self.outstanding.get(mid, -1))

    def late_replies(self) -> list[tuple[int, Message]]:
        """(client, reply) for every kept message whose reply (or error reply) has come since."""
        if not self.outstanding:
            return []
        got = list(self.pull_messages(list(self.outstanding)))
        return [(self.outstanding.pop(m.metadata.reply_to_message_id), m) for m in got
                if m.metadata.reply_to_message_id in self.outstanding]


def poll_interval(grid: Grid) -> float:
    """Seconds between two pulls of replies on ``grid``: its own interval where it has one (the simulation's
    in-memory grid: 10 ms, set in server_app.serve), else 0.2 s (Flower's deployment grid sleeps 3 s)."""
    interval = getattr(grid, "pull_interval", None)
    return interval if isinstance(interval, float) else 0.2


def wait_for_replies(grid: Grid, message_ids: Iterable[str], seconds: float) -> None:
    """Wait ``seconds``, or less where ``grid`` can say a reply to one of ``message_ids`` is ready (the
    in-process Grid's ``wait_any``)."""
    if hasattr(grid, "wait_any"):
        grid.wait_any(list(message_ids), seconds)
    else:
        time.sleep(seconds)
