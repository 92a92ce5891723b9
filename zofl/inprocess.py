"""The in-process engine: the same ServerApp code on a Grid of our own, without Ray or a SuperLink.

``InProcessGrid`` implements Flower's ``Grid`` (push / pull / send-and-receive of real Flower
``Message`` objects); each message is handled by the real ``ClientApp`` (``zofl.client_app.app``)
in a pool of ``workers`` processes (or, with workers = 0, in one thread of this process), with a
``Context`` per node that persists across messages as in Flower's simulation. ``run_inprocess``
runs ``server_app.serve`` on it, so every engine (sync, legacy, async) and every strategy runs
here exactly as under ``flwr run``, number for number (tests/test_engines.py): this is the cheap
engine for tests, and the pure-compute reference of the benchmarks.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Iterable, Mapping
from uuid import uuid4

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.app.error import Error
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from .config import clients_per_node
from .core.protocol import NUM_PARTITIONS, PARTITION_ID
from .core.shares import num_nodes
from .launch import die_with_parent
from .server_app import make_run, serve
from .strategies.wire import message_config

CLIENT_APP = "zofl.client_app:app"  # the ClientApp a grid runs unless told another (a user's App: tests)


def _handle(message: Message, context: Context, client_app: str = CLIENT_APP) -> tuple[Message, Context]:
    """Run the ClientApp ``client_app`` ("module:attribute", imported in the worker) on one message; the node's
    Context comes back with the reply."""
    module, _, attr = client_app.partition(":")
    app = getattr(importlib.import_module(module), attr)
    try:
        reply = app(message, context)
    except Exception as exc:  # as Flower's simulation: an exception becomes an error reply
        reply = Message(Error(code=0, reason=f"{type(exc).__name__}:<'{exc}'>"), reply_to=message)
    return reply, context


class InProcessGrid(Grid):
    """Flower's Grid with m nodes whose ClientApps run in a local pool (see the module docstring)."""

    def __init__(self, run_config: Mapping[str, Any], num_nodes: int, workers: int = 1, start_method: str = "fork",
                 node_config: Mapping[int, dict] | None = None, silent: frozenset[int] = frozenset(),
                 restart: Mapping[int, tuple] | None = None, gone: frozenset[int] = frozenset(),
                 client_app: str = CLIENT_APP):
        run_id = uuid4().int >> 65  # as Flower's: a run of its own (the clients' state files are per run id)
        self._run = Run.create_empty(run_id)
        self.client_app = client_app
        # the identity of this process as a ServerApp task, as Flower's runtime (and start_grid) set it
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
        rng = np.random.default_rng(12345)  # node ids as arbitrary as Flower's: nothing may assume id == partition
        ids = [int(i) for i in rng.choice(2**53, size=num_nodes, replace=False)]
        self.contexts = {
            nid: Context(run_id=run_id, node_id=nid,
                         node_config=(node_config or {}).get(i, {PARTITION_ID: i, NUM_PARTITIONS: num_nodes}),
                         state=RecordDict(), run_config=dict(run_config))
            for i, nid in enumerate(ids)}
        # the workers end with this process however it ends, SIGKILL included (``die_with_parent``); the signal
        # follows the thread that started them (the one that first submits work), so a grid is used from one
        # thread that outlives its runs, as run_inprocess does
        self.pool: Executor = ProcessPoolExecutor(workers, mp_context=mp.get_context(start_method),
                                                  initializer=die_with_parent, initargs=(os.getpid(),)) \
            if workers > 0 else ThreadPoolExecutor(1)
        self.pending: dict[str, tuple[Future, int, Message]] = {}
        # partitions whose node never answers a train message (a SuperNode that died): tests of the engines
        self.silent = {nid for i, nid in enumerate(ids) if i in silent}
        # partitions whose node the SuperLink has deleted (missed heartbeats): a train message to it is
        # answered at once with NODE_UNAVAILABLE, as Flower's link state answers it
        self.gone = {nid for i, nid in enumerate(ids) if i in gone}
        # restart {partition: (r_dead, r_back)}: its node stops answering from round r_dead (0-based), is
        # dropped from the federation a round later (Flower: missed heartbeats), and a new node (a new
        # id, as a restarted SuperNode gets) holding the same partition joins from round r_back
        self.restart = {}
        self.rounds_sent = -1
        for i, (r_dead, r_back, *config) in (restart or {}).items():  # config: the new node's, else the old one's
            new = int(rng.integers(2**53))
            self.restart[i] = (ids[i], new, r_dead, r_back)
            self.contexts[new] = Context(run_id=run_id, node_id=new, state=RecordDict(), run_config=dict(run_config),
                                         node_config=dict(config[0] if config else self.contexts[ids[i]].node_config))

    # -- Grid ---------------------------------------------------------------------------------
    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        gone, absent = set(), set()
        for old, new, r_dead, r_back in self.restart.values():
            if self.rounds_sent >= r_dead + 1:
                gone.add(old)
            if self.rounds_sent + 1 < r_back:
                absent.add(new)
        return [n for n in self.contexts if n not in gone | absent]

    @staticmethod
    def _round_of(msg: Message) -> int | None:
        """The round a train message is for: its config record, Message API or legacy API (FitIns)."""
        if not msg.metadata.message_type.startswith("train"):
            return None
        config = message_config(msg)
        return int(config["round"]) if config is not None and "round" in config else None

    def _dead(self, node: int, msg: Message) -> bool:
        if not msg.metadata.message_type.startswith("train"):
            return False
        if node in self.silent:
            return True
        r = self._round_of(msg)
        return r is not None and any(node == old and r >= r_dead for old, _, r_dead, _ in self.restart.values())

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            node = msg.metadata.dst_node_id
            r = self._round_of(msg)
            if r is not None:
                self.rounds_sent = max(self.rounds_sent, r)
            if node in self.gone and msg.metadata.message_type.startswith("train"):
                # the SuperLink's own reason; imported here, since its package adds ~0.4 s to start-up
                from flwr.server.superlink.linkstate.utils import NODE_UNAVAILABLE_ERROR_REASON

                fut: Future = Future()
                fut.set_result((Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason=NODE_UNAVAILABLE_ERROR_REASON),
                                        reply_to=msg), self.contexts[node]))
                self.pending[mid] = (fut, node, msg)
            elif self._dead(node, msg):
                self.pending[mid] = (Future(), node, msg)  # never done
            else:
                self.pending[mid] = (self.pool.submit(_handle, msg, self.contexts[node], self.client_app), node, msg)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = []
        now = time.time()
        for mid in message_ids:
            fut, node, msg = self.pending.get(mid, (None, None, None))
            if fut is None:
                continue
            if not fut.done():
                if now > msg.metadata.created_at + msg.metadata.ttl:  # as Flower's link state does
                    del self.pending[mid]
                    out.append(Message(Error(code=ErrorCode.MESSAGE_UNAVAILABLE, reason="Message TTL has expired"),
                                       reply_to=msg))
                continue
            del self.pending[mid]
            reply, context = fut.result()
            self.contexts[node] = context
            reply.metadata.__dict__["_message_id"] = str(uuid4())
            out.append(reply)
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push, wait until every reply is in, the timeout passes or every TTL has expired, pull.

        A message whose TTL expired gets Flower's error reply ("Message TTL has expired"), as the
        SuperLink's link state gives it: the legacy API sends without a timeout and relies on it."""
        ids = list(self.push_messages(messages))
        if not ids:
            return []
        end = max(self.pending[m][2].metadata.created_at + self.pending[m][2].metadata.ttl for m in ids)
        if timeout is not None:
            end = min(end, time.time() + timeout)
        wait([self.pending[m][0] for m in ids], timeout=max(0.0, end - time.time()) + 0.01)
        return self.pull_messages(ids)

    def wait_any(self, message_ids: Iterable[str], timeout: float) -> None:
        """Block until a reply to one of ``message_ids`` is ready or ``timeout`` passes."""
        futures = [self.pending[m][0] for m in message_ids if m in self.pending]
        if futures:
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)
        else:
            time.sleep(timeout)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def run_inprocess(run_config: Mapping[str, Any], workers: int = 1, start_method: str = "fork",
                  node_config: Mapping[int, dict] | None = None,
                  silent: frozenset[int] = frozenset(),
                  restart: Mapping[int, tuple] | None = None,
                  gone: frozenset[int] = frozenset(), share_nodes: bool = True) -> tuple[Path, np.ndarray]:
    """Run ``run_config`` in-process with ``workers`` client processes (0 = one thread in this process).

    ``start_method`` "spawn" makes each worker import and load its data itself, as a Ray actor
    does (the fair reference for benchmarks); "fork" shares what this process already loaded.
    ``node_config`` replaces the node config of some nodes (tests of misconfigured SuperNodes);
    the nodes of the partitions in ``silent`` never answer work (tests of a dead SuperNode);
    ``restart`` {partition: (r_dead, r_back)} kills a partition's node at round r_dead and starts a new
    one for it at round r_back (tests of a restarted SuperNode; a third element: the new node's node config);
    the SuperLink answers every train
    message to a node in ``gone`` at once with NODE_UNAVAILABLE (a SuperNode deleted after missed heartbeats).
    ``share_nodes``: the nodes as ``zofl run``'s simulation has them (k clients each, run-config clients-per-node,
    ``zofl.core.shares``); False: one node per client whatever clients-per-node says (the same numbers).

    Returns (results directory, final global model).
    """
    cfg, method, writer = make_run(dict(run_config))
    with writer:
        nodes = num_nodes(cfg.num_clients, clients_per_node(cfg)) if share_nodes else cfg.num_clients
        grid = InProcessGrid(run_config, nodes, workers, start_method, node_config, silent, restart, gone)
        try:
            x = serve(grid, cfg, method, writer)
        finally:
            grid.close()
    return writer.dir, x
