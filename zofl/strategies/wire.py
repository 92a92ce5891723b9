"""The wire protocol of ``zofl.core.protocol`` in Flower's records (Message API and legacy API).

Work travels as Flower's own convention, RecordDict {"arrays": ArrayRecord, "config": ConfigRecord},
and a reply as {"arrays": ArrayRecord, "metrics": MetricRecord with "num-examples"}, so Flower's
built-in strategies read our replies as they read any other. Arrays keep their names.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode

from ..core.protocol import ARRAYS, CONFIG, METRICS, NUM_EXAMPLES, TRAIN, Failure, Reply, Work

LEGACY_FIT_KEY = "fitins.parameters"  # what the legacy API's FitIns becomes in a RecordDict


def array_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})


def work_message(work: Work, node_id: int) -> Message:
    config = ConfigRecord({"round": work.round, "H": work.H, **work.config})
    content = RecordDict({ARRAYS: array_record(work.arrays), CONFIG: config})
    return Message(content, dst_node_id=node_id, message_type=TRAIN)


def numpy_form(content: RecordDict) -> tuple[list[np.ndarray], dict]:
    """The NumPyClient form (arrays in order, config naming them) of a work message's content."""
    arrays = content.array_records[ARRAYS]
    config = dict(content.config_records[CONFIG])
    config[ARRAYS] = ",".join(arrays.keys())
    return [a.numpy() for a in arrays.values()], config


def reply_content(arrays: list[np.ndarray], num_examples: int, metrics: dict) -> RecordDict:
    """A NumPyClient's (arrays, num_examples, metrics) as a reply RecordDict (names from metrics)."""
    names = [n for n in str(metrics.get(ARRAYS, "")).split(",") if n]
    if len(names) != len(arrays):
        names = [f"#{i}" for i in range(len(arrays))]
    numbers = {k: v for k, v in metrics.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("pid",)}
    return RecordDict({ARRAYS: array_record(dict(zip(names, arrays))),
                       METRICS: MetricRecord({**numbers, NUM_EXAMPLES: int(num_examples)})})


def error_kind(code: int | None, reason: str) -> str:
    """The kind (``core.protocol.FAILURE_KINDS``) of a Flower error reply: "late" when the message's
    TTL ran out before a reply (code MESSAGE_UNAVAILABLE; the legacy API sends with ttl = the round
    timeout), "lost" when the SuperNode stopped sending heartbeats (NODE_UNAVAILABLE), else "error"
    (the ClientApp raised or crashed). The legacy API passes only the reason on, so it is read too."""
    if code == ErrorCode.MESSAGE_UNAVAILABLE or "Message Unavailable" in reason or "TTL has expired" in reason:
        return "late"
    if code == ErrorCode.NODE_UNAVAILABLE or "Node Unavailable" in reason:
        return "lost"
    return "error"


def decode_reply(msg: Message, pid: int) -> Reply | Failure:
    """A reply message as a Reply, or a Failure (the client raised, or the message is malformed)."""
    if msg.has_error():
        return Failure(pid, f"error {msg.error.code}: {msg.error.reason}", error_kind(msg.error.code, msg.error.reason))
    try:
        arrays = {k: a.numpy() for k, a in msg.content.array_records[ARRAYS].items()}
        metrics = dict(msg.content.metric_records[METRICS])
        return Reply(pid, arrays, int(metrics.pop(NUM_EXAMPLES)), metrics)
    except (KeyError, ValueError, TypeError) as exc:
        return Failure(pid, f"malformed reply ({type(exc).__name__}: {exc})", "rejected")


def decode_replies(replies: Iterable[Message], pid_of_node: dict[int, int],
                   node_of=None) -> tuple[list[Reply], list[Failure]]:
    """Replies and failures; ``node_of(msg)`` names the node a reply is about (default: its sender)."""
    good, bad = [], []
    for msg in replies:
        node = node_of(msg) if node_of is not None else msg.metadata.src_node_id
        out = decode_reply(msg, pid_of_node.get(node, -1))
        (bad if isinstance(out, Failure) else good).append(out)
    return good, bad
