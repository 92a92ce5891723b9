"""The ClientApp: a NumPyClient runs the configured method's client work on its partition.

``ZOFLClient`` (a ``NumPyClient``) is the client-side unit of work in every engine: its ``work``
runs the method's ``client_work`` (pure numpy) on a ``Work``, applies the device speed and the
injected faults of ``zofl.faults``, and returns the ``Reply``. The ``ClientApp`` routes Flower's
messages to it, converting each once (``zofl.strategies.wire``):
* ``train`` with our records (engines sync and async, and Flower's Message-API FedAvg): the
  message's RecordDict -> ``Work`` -> ``ZOFLClient.work`` -> ``Reply`` -> a reply RecordDict,
* ``train`` with the legacy API's FitIns records (engine legacy), through Flower's own legacy
  handler, which calls ``NumPyClient.fit`` (the NumPyClient form -> ``Work`` -> the same ``work``),
* ``evaluate`` (federated evaluation, run-config federated-eval): x_r on the client's held-out data (a node's own,
  or in simulation its share of the test set), answered as {eval_loss, eval_acc, num-examples}; the legacy API's
  EvaluateIns through Flower's legacy handler, which calls ``NumPyClient.evaluate``,
* ``query.partition``: the node's partition-id, without loading the run's dataset (``strategies.nodes``); a node
  whose node config names data of its own (``data-path``: ``zofl.tasks.local``) reads and checks them then and
  adds their size N_i, fingerprint and shape, or says why they cannot be used (the server refuses it alone); with
  run-config server-data = none a simulated client reports its partition's N_i and fingerprint the same way.

The run-config is validated once per process (``prepared``), not per message: Flower builds a new
client for every message, from the same run-config.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.client.message_handler.message_handler import handle_legacy_message_from_msgtype
from flwr.clientapp import ClientApp

from .config import ConfigError, clients_per_node, parse_config
from .core import client_state
from .core.protocol import (
    ARRAYS,
    CONFIG,
    DATA_ERROR,
    DATA_FINGERPRINT,
    MAX_DATA_ERROR,
    METRICS,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    PARTITION_ID,
    Reply,
    Work,
)
from .core.shares import num_nodes, share
from .faults import (
    InjectedCrash,
    burn_cpu_s,
    corrupt,
    delay_factor,
    draw_fault,
    hostile_ids,
    hostile_reply,
    slowdown_s,
    speed_factor,
    task_delays,
)
from .methods import METHODS
from .setup import DATA_FP, check_data, data_stamp, local_task, prepare, prepare_local
from .strategies.wire import (
    LEGACY_EVALUATE_KEY,
    LEGACY_FIT_KEY,
    client_of_message,
    decode_work,
    eval_content,
    eval_to_numpy,
    reply_content,
    reply_to_numpy,
    work_from_numpy,
)
from .tasks import evaluate
from .tasks.data import ArrayData, array_fingerprint, held_out_rows
from .tasks.local import LocalTask, NodeData, NodeDataError, summary

STATE_KEY = "zofl"


def load_state(context: Context) -> dict[str, np.ndarray]:
    """The client's arrays kept across rounds (e.g. SCAFFOLD's control variate) from its Context."""
    rec = context.state.array_records.get(STATE_KEY)
    return {k: v.numpy() for k, v in rec.items()} if rec is not None else {}


def save_state(context: Context, state: dict[str, np.ndarray]) -> None:
    if state:
        context.state.array_records[STATE_KEY] = ArrayRecord({k: Array(v) for k, v in state.items()})


def node_partition(context: Context, num_clients: int | None = None) -> tuple[int, int]:
    node = context.node_config
    pid = int(node.get(PARTITION_ID, 0))
    return pid, int(node.get(NUM_PARTITIONS, num_clients if num_clients is not None else 1))


def prepared(run_config: Mapping[str, Any]):
    """(cfg, task, spec) of a run-config, validated and its data checked once per process, run-config and
    version of the data file (a file replaced in place is checked again, as every per-process cache)."""
    try:
        stamp = data_stamp(parse_config(run_config))
    except ConfigError:
        stamp = ()  # an impossible value: prepare's checks name it
    return _prepared(tuple(sorted(run_config.items())), stamp)


@functools.lru_cache(maxsize=4)
def _prepared(items: tuple, stamp: tuple) -> tuple:
    return prepare(dict(items))


def prepared_for(context: Context) -> tuple:
    """(cfg, task, spec) of this node: ``prepared``, or, when its node config names data of its own, the run-config
    checked without reading the run's dataset and the task with the node's data as its client's."""
    node = NodeData.of(context.node_config)
    if node is None:
        return prepared(context.run_config)
    cfg, task, spec, shape = _prepared_local(tuple(sorted(context.run_config.items())))
    return cfg, local_task(cfg, task, shape, node), spec


@functools.lru_cache(maxsize=4)
def _prepared_local(items: tuple) -> tuple:
    return prepare_local(dict(items))


def node_clients(context: Context, cfg) -> range:
    """The clients this node serves: its partition-id of num-partitions = num-clients, or (clients-per-node k > 1,
    ``zofl.core.shares``) the share of its partition-id of num-partitions = ceil(num-clients / k)."""
    m, k = cfg.num_clients, clients_per_node(cfg)
    pid, parts = node_partition(context, m)
    if parts == m and 0 <= pid < m:
        return range(pid, pid + 1)
    if k > 1 and parts == num_nodes(m, k) and 0 <= pid < parts:
        return share(pid, m, k)
    shared = f" (or num-partitions={num_nodes(m, k)} with clients-per-node={k})" if k > 1 else ""
    raise ConfigError(f"this SuperNode has partition-id={pid}, num-partitions={parts}, but run-config "
                      f"num-clients={m}: they must agree{shared}")


class ZOFLClient(NumPyClient):
    """Thin adapter: Flower in, ``METHODS[strategy].client_work`` (pure numpy) out.

    Flower rebuilds the client for every message; what must persist lives in ``context.state`` (a node serving
    several clients: in a file per client, ``zofl.core.client_state``). ``pid``: the client the message names
    (a node serving one client may be sent messages that name none: the legacy API's).
    """

    def __init__(self, context: Context, pid: int | None = None):
        self.context = context
        self.cfg, self.task, self.spec = prepared_for(context)
        self.own_data = isinstance(self.task, LocalTask)  # the server's data fingerprint is not ours
        serves = node_clients(context, self.cfg)
        if pid is None and len(serves) > 1:
            raise ConfigError(f"this SuperNode serves clients {serves.start}..{serves.stop - 1}: the message names "
                              f"none of them")
        self.pid = serves.start if pid is None else pid
        if self.pid not in serves:
            raise ConfigError(f"this SuperNode serves clients {serves.start}..{serves.stop - 1}, not client "
                              f"{self.pid}")
        self.shared_node = len(serves) > 1
        self.client_work = METHODS[self.cfg.strategy].client_work
        self.speed = speed_factor(self.cfg.seed, self.pid, self.cfg.speed_profile, self.cfg.speed_param,
                                  self.cfg.slow_clients)
        self.hostile = hostile_ids(self.cfg.hostile_clients)
        # device time is simulated (not slept) when the asynchronous engine runs on the simulated clock
        self.real_time = not (self.cfg.engine == "async" and self.cfg.clock == "simulated")

    def fit(self, parameters, config):
        """NumPyClient's entry (the legacy API's handler calls it): the NumPyClient form in and out."""
        return reply_to_numpy(self.work(work_from_numpy(self.pid, parameters, config)))

    def work(self, work: Work) -> Reply:
        """The method's client work on ``work``, with the device speed and the injected faults."""
        cfg = self.cfg
        expected = work.config.pop(DATA_FP, None)
        if not self.own_data:
            check_data(expected, self.task, self.spec, self.pid)  # the server's data?
        fault = draw_fault(cfg.seed, work.round, self.pid, cfg.crash_prob, cfg.hang_prob, cfg.corrupt_prob)
        if fault == "crash":
            raise InjectedCrash(f"client {self.pid}: injected crash in round {work.round} (crash-prob)")
        t0 = time.perf_counter()
        down, up, mult = self.real_delays(work.round)
        if down > 0:
            time.sleep(down)
        t_solve = time.perf_counter()
        state = self.load_state()
        reply = self.client_work(cfg, self.task, self.spec, work, state)
        self.save_state(state)
        if self.real_time:  # device speed: wall time = (compute + steps * step-time-s) x multiplier / s_i
            wait = slowdown_s(time.perf_counter() - t_solve, int(reply.metrics.get("steps", 0)), self.speed,
                              cfg.step_time_s, mult)
            if cfg.real_delays == "compute":
                burn_cpu_s(wait)
            elif wait > 0:
                time.sleep(wait)
            if up > 0 or fault == "hang":
                time.sleep(up + (cfg.hang_s if fault == "hang" else 0.0))
        if self.pid in self.hostile:  # attack injection (ours): replies meant to harm, that pass the checks
            reply.arrays = hostile_reply(work.arrays, reply.arrays, cfg.attack, cfg.attack_scale, cfg.reply_max_abs,
                                         cfg.seed, work.round, self.pid)
        if fault is not None and fault.startswith("corrupt:"):
            names = list(reply.arrays)
            bad = corrupt(list(reply.arrays.values()), fault.split(":", 1)[1])
            reply.arrays = dict(zip(names, bad))
        reply.metrics.update(speed=self.speed, wall_s=time.perf_counter() - t0)
        return reply

    def load_state(self) -> dict[str, np.ndarray]:
        if self.shared_node:
            return client_state.load(self.context.run_id, self.pid)
        return load_state(self.context)

    def save_state(self, state: dict[str, np.ndarray]) -> None:
        if self.shared_node:
            client_state.save(self.context.run_id, self.pid, state)
        else:
            save_state(self.context, state)

    def real_delays(self, task: int) -> tuple[float, float, float]:
        """(download s, upload s, compute multiplier) this client lives for real in task (round) ``task``: the
        simulated clock's own draw (``task_delays``) with ``real-delays`` on, else (0, 0, 1)."""
        cfg = self.cfg
        if not self.real_time or cfg.real_delays == "off":
            return 0.0, 0.0, 1.0
        return task_delays(cfg.seed, task, self.pid, cfg.comm_s, delay_factor(self.pid, cfg.slow_clients,
                                                                            cfg.straggler_factor))

    def evaluate(self, parameters, config):
        """NumPyClient's evaluate (the legacy API's handler calls it): x_r on this client's held-out data, as
        (loss, num_examples, {"eval_acc": acc})."""
        return eval_to_numpy(*self.evaluate_x(np.asarray(parameters[0])))

    def evaluate_x(self, x: np.ndarray) -> tuple[int, float, float]:
        """(held-out examples, mean loss, accuracy) of the model ``x`` on this client's held-out data: its own
        data's held-out part, or in simulation its share of the test set (``tasks.data.held_out_rows``); (0, 0, 0)
        when it holds none."""
        data = held_out(self.task, self.spec, self.pid, self.cfg.num_clients, self.cfg.seed)
        if len(data) == 0:
            return 0, 0.0, 0.0
        loss, acc = evaluate(self.task, x, data)
        return len(data), loss, acc


def held_out(task, spec, pid: int, num_clients: int, seed: int) -> ArrayData:
    """A client's held-out data for federated evaluation: a node's own (``LocalTask``), else its share of the run's
    test set."""
    data = task.test_data(spec)
    if isinstance(task, LocalTask):
        return data
    rows = held_out_rows(len(data), num_clients, pid, seed)
    return ArrayData(data.x[rows], data.y[rows], data.num_classes)


def client_fn(context: Context, pid: int | None = None):
    return ZOFLClient(context, pid).to_client()


def named_client(msg: Message) -> int | None:
    """The client a train or evaluate message names (``wire.client_of_message``); None where it names none."""
    try:
        return client_of_message(msg, strict=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    if LEGACY_FIT_KEY in msg.content.array_records:  # engine legacy: Flower's FitIns -> NumPyClient.fit
        return handle_legacy_message_from_msgtype(functools.partial(client_fn, pid=named_client(msg)), msg, context)
    t0 = time.perf_counter()
    client = ZOFLClient(context, named_client(msg))
    reply = client.work(decode_work(msg.content, client.pid))
    # handle_s: from receiving the message to the reply, all on this node's clock; the server tells a
    # reply that came late while its work fitted the deadline (it waited in a queue) from a slow client
    reply.metrics["handle_s"] = time.perf_counter() - t0
    return Message(reply_content(reply), reply_to=msg)


def without_paths(reason: str, node_config: Mapping[str, Any]) -> str:
    """``reason`` with the node's own file paths (data-path, test-path, as given and resolved) replaced by the
    node-config key: why a node's data cannot be used reaches the server, where they live must not."""
    for key in ("data-path", "test-path"):
        given = node_config.get(key)
        if isinstance(given, str) and given.strip():
            raw = given.strip()
            for form in sorted({raw, os.path.expanduser(raw), os.path.realpath(os.path.expanduser(raw)),
                                os.path.abspath(os.path.expanduser(raw))}, key=len, reverse=True):
                reason = reason.replace(form, f"<{key}>")
    return reason


@app.evaluate()
def evaluate_model(msg: Message, context: Context) -> Message:
    """Federated evaluation: x_r on this client's held-out data (``ZOFLClient.evaluate_x``)."""
    if LEGACY_EVALUATE_KEY in msg.content.array_records:  # engine legacy: EvaluateIns -> NumPyClient.evaluate
        return handle_legacy_message_from_msgtype(functools.partial(client_fn, pid=named_client(msg)), msg, context)
    client = ZOFLClient(context, named_client(msg))
    x = msg.content.array_records[ARRAYS]["x"].numpy()
    return Message(eval_content(*client.evaluate_x(x)), reply_to=msg)


@app.query("partition")
def partition(msg: Message, context: Context) -> Message:
    pid, parts = node_partition(context)
    content = RecordDict({METRICS: MetricRecord({PARTITION_ID: pid, NUM_PARTITIONS: parts})})
    try:
        node = NodeData.of(context.node_config)
        if node is not None:  # its own data: read and checked now, before round 1; the server learns their summary
            _, task, _ = prepared_for(context)
            content[CONFIG] = ConfigRecord(summary(task.data))
        elif context.run_config.get("server-data") == "none":  # a server without data learns N_i from the client
            cfg, task, spec = prepared(context.run_config)
            clients = node_clients(context, cfg)
            data = [task.client_data(spec, i) for i in clients]
            sizes, prints = [len(d) for d in data], [array_fingerprint(d.x, d.y) for d in data]
            one = len(clients) == 1 and int(parts) == cfg.num_clients  # a node per client: one of each, as before
            content[CONFIG] = ConfigRecord({NUM_EXAMPLES: sizes[0] if one else sizes,  # a share: one per client
                                            DATA_FINGERPRINT: prints[0] if one else prints})
    except (NodeDataError, ConfigError) as exc:  # the file named here, on the node; the server gets the key only
        logging.getLogger("zofl").error("this SuperNode's data cannot be used, the server refuses it: %s", exc)
        content[CONFIG] = ConfigRecord({DATA_ERROR: without_paths(str(exc), context.node_config)[:MAX_DATA_ERROR]})
    return Message(content, reply_to=msg)
