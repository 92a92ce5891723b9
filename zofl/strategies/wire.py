"""Work and Reply (``zofl.core.protocol``) in Flower's forms: the only module that converts them.

A message changes form once on each side: the server turns a ``Work`` into a Message and the
client turns that Message back into the ``Work``; the client turns its ``Reply`` into a RecordDict
and the server turns that back into the ``Reply``.

* Message API (engines sync and async, and Flower's own Message-API FedAvg): work is Flower's own
  convention, RecordDict {"arrays": ArrayRecord, "config": ConfigRecord}, and a reply is
  {"arrays": ArrayRecord, "metrics": MetricRecord with "num-examples"}, so Flower's built-in
  strategies read our replies as they read any other. Arrays keep their names.
* The legacy API (engine legacy): Flower's FitIns / FitRes carry the NumPyClient form, arrays in
  order with the config entry ``arrays`` naming them (``work_to_numpy`` ... ``reply_from_numpy``);
  Flower's legacy handler calls ``NumPyClient.fit`` with it.
* Federated evaluation: an ``evaluate`` message carries x_k and the round; the answer is a MetricRecord
  {eval_loss, eval_acc, num-examples} (Message API), or ``NumPyClient.evaluate``'s (loss, num_examples,
  {eval_acc}) inside the legacy API's EvaluateRes.
* A user's own App (``zofl.strategies.app``, ``zofl.client``): Flower holds the model as the user's ArrayRecord
  (e.g. ``ArrayRecord(model.state_dict())``); the methods see it as one flat float64 vector x (``flat_model``,
  in the record's order) and give it back in the record's names and shapes, float64 (``model_record``). Work to
  a user's ClientApp is in Flower's convention too: "arrays" is the model in the user's names (the ClientApp may
  ``load_state_dict`` it), the method's other arrays are in "zofl.arrays" (``app_work_content``,
  ``decode_app_work``); it also carries the client id the server gives it and the run's settings (``APP_CLIENT_ID``,
  ``APP_SETTINGS``); the server learns who holds which client id with a ``train`` message that asks only that
  (``APP_QUERY``), since a user's ClientApp answers ``train`` and ``evaluate`` only.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode

from ..core.evaluation import EvalAnswer, eval_problem
from ..core.protocol import (
    ARRAYS,
    CONFIG,
    EVAL_ACC,
    EVAL_LOSS,
    EVALUATE,
    METRICS,
    NUM_EXAMPLES,
    TRAIN,
    Failure,
    Reply,
    Scalar,
    Work,
)

LEGACY_FIT_KEY = "fitins.parameters"  # what the legacy API's FitIns becomes in a RecordDict
LEGACY_EVALUATE_KEY = "evaluateins.parameters"  # and its EvaluateIns
LEGACY_FIT_CONFIG = "fitins.config"  # the FitIns' config in that RecordDict
LEGACY_EVALUATE_CONFIG = "evaluateins.config"  # and the EvaluateIns'
APP_QUERY = "zofl.query"  # config entry of a user ClientApp's train message that asks its client id only
APP_CLIENT_ID = "zofl.client-id"  # config entry: the client id i the server gives a user ClientApp's node
APP_SETTINGS = "zofl.settings"  # config entry: the run's settings that differ from the defaults, as JSON
MAX_APP_SETTINGS = 64 * 1024  # characters of those settings a message may carry (a few hundred in practice)
APP_ARRAYS = "zofl.arrays"  # a user ClientApp's work: the method's arrays besides x (x is "arrays", the model)
Layout = tuple[tuple[str, tuple[int, ...], str], ...]  # a model record's (name, shape, dtype) in order


def array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})


def flat_model(record: ArrayRecord) -> tuple[np.ndarray, Layout]:
    """A user's model record as the methods' x (one flat float64 vector, the arrays in the record's order), and
    its layout for ``model_record``. Refuses (ValueError, naming the array) an array that is not real numbers."""
    parts, layout = [], []
    for name, arr in record.items():
        a = arr.numpy()
        if a.dtype.kind not in "fiu":
            raise ValueError(f"model array {name!r} has dtype {a.dtype}: the methods need real numbers")
        parts.append(a.astype(np.float64).ravel())
        layout.append((name, tuple(a.shape), str(a.dtype)))
    return (np.concatenate(parts) if parts else np.zeros(0)), tuple(layout)


def model_record(x: np.ndarray, layout: Layout) -> ArrayRecord:
    """x in the names and shapes of ``layout``, float64 (the methods' precision: Flower then holds x exactly)."""
    size = sum(int(np.prod(shape, dtype=np.int64)) for _, shape, _ in layout)
    if x.size != size:
        raise ValueError(f"x has {x.size} entries, the model {size}")
    out, i = {}, 0
    for name, shape, _ in layout:
        n = int(np.prod(shape, dtype=np.int64))
        out[name] = Array(np.ascontiguousarray(x[i:i + n]).reshape(shape))
        i += n
    return ArrayRecord(out)


# -- the Message API: server -> client -----------------------------------------------------------
def work_message(work: Work, node_id: int) -> Message:
    return work_messages([work], {work.pid: node_id})[0]


def work_messages(works: list[Work], nodes: Mapping[int, int]) -> list[Message]:
    """One message per work (to ``nodes[work.pid]``); an array sent to several clients (x_r) becomes Flower's
    ``Array`` once, shared by their records, as Flower's own strategies share one ArrayRecord."""
    made: dict[int, Array] = {}

    def array(v: np.ndarray) -> Array:
        if id(v) not in made:
            made[id(v)] = Array(np.asarray(v))
        return made[id(v)]

    return [Message(RecordDict({ARRAYS: ArrayRecord({k: array(v) for k, v in w.arrays.items()}),
                                CONFIG: ConfigRecord({"round": w.round, "H": w.H, **w.config,
                                                      APP_CLIENT_ID: int(w.pid)})}),
                    dst_node_id=nodes[w.pid], message_type=TRAIN) for w in works]


def message_config(msg: Message) -> ConfigRecord | None:
    """The config record of a message the server sends: "config" (the Message API's, zofl's and Flower's), or the
    legacy API's FitIns or EvaluateIns config; None for a message with none (a partition query)."""
    records = msg.content.config_records
    return next((records[k] for k in (CONFIG, LEGACY_FIT_CONFIG, LEGACY_EVALUATE_CONFIG) if k in records), None)


def client_of_message(msg: Message, strict: bool = False) -> int | None:
    """The client a message the server sends names (``APP_CLIENT_ID`` in its config, or in the legacy API's FitIns or
    EvaluateIns config: every train and evaluate message does), None for any other (a partition query). A value that
    is no integer: None, or with ``strict`` (a node reading what it was sent) a ValueError naming it."""
    config = message_config(msg)
    pid = None if config is None else config.get(APP_CLIENT_ID)
    if pid is None or isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    if strict:
        raise ValueError(f"the message names client {str(pid)[:40]!r}, not an integer")
    return None


def decode_work(content: RecordDict, pid: int) -> Work:
    """The client's side of ``work_message`` (also Flower's own FedAvg's, whose config carries round and H)."""
    config = dict(content.config_records[CONFIG])
    if "round" not in config or "H" not in config:
        raise ValueError(f"work for client {pid}: config {config} lacks 'round' or 'H'")
    arrays = {k: a.numpy() for k, a in content.array_records[ARRAYS].items()}
    extra = {k: v for k, v in config.items() if k not in ("round", "H", APP_CLIENT_ID)}
    return Work(pid, int(config["round"]), int(config["H"]), arrays, extra)


def app_work_content(content: RecordDict, model: ArrayRecord) -> None:
    """A work message's content for a user's ClientApp, in place: x as ``model`` (the user's names) under "arrays",
    the method's other arrays under ``APP_ARRAYS``."""
    arrays = content.array_records[ARRAYS]
    content[APP_ARRAYS] = ArrayRecord({k: a for k, a in arrays.items() if k != "x"})
    content[ARRAYS] = model


def decode_app_work(content: RecordDict, pid: int) -> Work:
    """The client's side of ``app_work_content``: the Work the method's client half takes (x flat); a work sent
    without x (a phase that needs none) is in zofl's own form."""
    if APP_ARRAYS not in content.array_records:
        return decode_work(content, pid)
    work = decode_work(RecordDict({CONFIG: content.config_records[CONFIG],
                                   ARRAYS: content.array_records.get(APP_ARRAYS, ArrayRecord())}), pid)
    work.arrays = {"x": flat_model(content.array_records[ARRAYS])[0], **work.arrays}
    return work


# -- the Message API: client -> server -----------------------------------------------------------
def reply_content(reply: Reply) -> RecordDict:
    """A Reply as a reply RecordDict: its named arrays, and its numeric metrics with num-examples (a
    MetricRecord holds numbers only)."""
    numbers = {k: v for k, v in reply.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return RecordDict({ARRAYS: array_record(reply.arrays),
                       METRICS: MetricRecord({**numbers, NUM_EXAMPLES: int(reply.num_examples)})})


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
    except (KeyError, ValueError, TypeError, OverflowError) as exc:  # OverflowError: num-examples = inf
        return Failure(pid, f"malformed reply ({type(exc).__name__}: {exc})", "rejected")


def decode_replies(replies: Iterable[Message],
                   client_of: Callable[[Message], int]) -> tuple[list[Reply], list[Failure]]:
    """Replies and failures; ``client_of(reply)`` is the client whose work it answers (the client the server's
    message named, ``DeadlineGrid.client_of``; never what a reply claims)."""
    good, bad = [], []
    for msg in replies:
        out = decode_reply(msg, client_of(msg))
        (bad if isinstance(out, Failure) else good).append(out)
    return good, bad


# -- the legacy API's NumPyClient form (FitIns / FitRes) ---------------------------------------
def work_to_numpy(work: Work) -> tuple[list[np.ndarray], dict[str, Scalar]]:
    """The arrays in order, and the config entries: round, H, the array names (comma-separated), the method's."""
    return list(work.arrays.values()), {"round": work.round, "H": work.H, ARRAYS: ",".join(work.arrays), **work.config}


def work_from_numpy(pid: int, parameters: list[np.ndarray], config: Mapping[str, Scalar]) -> Work:
    """Decode NumPyClient work; without the ``arrays`` entry (Flower's own strategies) one array is ``x``."""
    names = [n for n in str(config.get(ARRAYS, "")).split(",") if n] or (["x"] if len(parameters) == 1 else [])
    if len(names) != len(parameters):
        raise ValueError(f"work for client {pid}: {len(parameters)} arrays but names {names}")
    extra = {k: v for k, v in config.items() if k not in ("round", "H", ARRAYS, APP_CLIENT_ID)}
    if "round" not in config or "H" not in config:
        raise ValueError(f"work for client {pid}: config {dict(config)} lacks 'round' or 'H'")
    return Work(pid, int(config["round"]), int(config["H"]), dict(zip(names, parameters)), extra)


def reply_to_numpy(reply: Reply) -> tuple[list[np.ndarray], int, dict[str, Scalar]]:
    """(arrays in order, num_examples, metrics naming the arrays), as ``NumPyClient.fit`` returns."""
    metrics = {**reply.metrics, "pid": reply.pid, ARRAYS: ",".join(reply.arrays)}
    return list(reply.arrays.values()), reply.num_examples, metrics


def reply_from_numpy(pid: int, arrays: list[np.ndarray], num_examples: int, metrics: Mapping[str, Any]) -> Reply:
    """Decode a NumPyClient reply; names that do not match the arrays are kept positionally (the
    reply checks then report the wrong shapes) rather than raising."""
    names = [n for n in str(metrics.get(ARRAYS, "")).split(",") if n]
    if len(names) != len(arrays):
        names = [f"#{i}" for i in range(len(arrays))]
    rest = {k: v for k, v in metrics.items() if k not in (ARRAYS, "pid")}
    return Reply(pid, dict(zip(names, arrays)), int(num_examples), rest)


# -- federated evaluation (``zofl.core.evaluation``): the model out, two numbers and a count back ---------------
def eval_messages(x: np.ndarray, k: int, nodes: Mapping[int, int]) -> list[Message]:
    """One ``evaluate`` message per held client, to its node, naming it: x_k (one Array shared by every record, as
    ``work_messages``) and the round, in Flower's convention ({"arrays", "config"})."""
    shared = ArrayRecord({"x": Array(np.asarray(x))})
    return [Message(RecordDict({ARRAYS: shared, CONFIG: ConfigRecord({"round": k, APP_CLIENT_ID: int(pid)})}),
                    dst_node_id=node, message_type=EVALUATE) for pid, node in sorted(nodes.items())]


def eval_content(num_examples: int, loss: float, acc: float) -> RecordDict:
    """A client's evaluation as a reply RecordDict: its metrics with num-examples (Flower's weighting key)."""
    return RecordDict({METRICS: MetricRecord({EVAL_LOSS: float(loss), EVAL_ACC: float(acc),
                                              NUM_EXAMPLES: int(num_examples)})})


def decode_eval(msg: Message, pid: int) -> EvalAnswer | str:
    """An evaluate reply as an ``EvalAnswer``, or why it cannot be used (an error reply, a malformed or
    out-of-range answer: ``core.evaluation.eval_problem``)."""
    if msg.has_error():
        return f"error {msg.error.code}: {str(msg.error.reason)[:200]}"
    try:
        metrics = msg.content.metric_records[METRICS]
        n, loss, acc = metrics[NUM_EXAMPLES], metrics[EVAL_LOSS], metrics[EVAL_ACC]
    except (KeyError, TypeError) as exc:
        return f"malformed evaluate reply ({type(exc).__name__}: {str(exc)[:200]})"
    return eval_answer(pid, n, loss, acc)


def eval_answer(pid: int, num_examples: Any, loss: Any, acc: Any) -> EvalAnswer | str:
    """The checked answer of client ``pid`` (either API), or why it is refused."""
    problem = eval_problem(num_examples, loss, acc)
    if problem:
        return problem
    return EvalAnswer(pid, int(num_examples), float(loss), float(acc))


def eval_to_numpy(num_examples: int, loss: float, acc: float) -> tuple[float, int, dict[str, Scalar]]:
    """``NumPyClient.evaluate``'s return: (loss, num_examples, {"eval_acc": acc})."""
    return float(loss), int(num_examples), {EVAL_ACC: float(acc)}
