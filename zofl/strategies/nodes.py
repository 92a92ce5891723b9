"""Which SuperNode holds which partition (client id i), learned without sending any work.

Every node answers a ``query.partition`` message with the ``partition-id`` and ``num-partitions``
of its node config (``zofl.client_app``); the reply costs no data loading. After this, each round
contacts only the clients it samples.
"""
from __future__ import annotations

import logging
import time

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from ..config import ConfigError
from ..core.protocol import METRICS, NUM_PARTITIONS, PARTITION_ID, QUERY_PARTITION

log = logging.getLogger("zofl")


def _complete_smaller_federation(grid: Grid, nodes: list[int]) -> bool:
    """Whether ``nodes`` are a whole federation already: every one says num-partitions = len(nodes)
    (a simulation's SuperNodes are all there from the start, and say so; deployed SuperNodes started
    for this run say num-partitions = num-clients, so the server keeps waiting for the others)."""
    msgs = [Message(RecordDict(), dst_node_id=n, message_type=QUERY_PARTITION) for n in nodes]
    try:
        replies = list(grid.send_and_receive(msgs, timeout=10.0))
    except Exception:  # noqa: BLE001 - an answer we cannot read is no proof: keep waiting
        return False
    sizes = set()
    for msg in replies:
        if msg.has_error():
            return False
        sizes.add(int(msg.content.metric_records[METRICS][NUM_PARTITIONS]))
    return len(replies) == len(nodes) and sizes == {len(nodes)}


def wait_for_nodes(grid: Grid, m: int, wait_s: float) -> list[int]:
    deadline = time.monotonic() + wait_s
    asked = False
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= m:
            return nodes
        if nodes and not asked:
            asked = True
            if _complete_smaller_federation(grid, nodes):
                raise ConfigError(
                    f"run-config num-clients={m} but the federation has {len(nodes)} SuperNodes: run "
                    f"`flwr run . --stream --federation-config \"num-supernodes={m}\"` (or `zofl run`, which sizes "
                    f"the federation itself), or set num-clients={len(nodes)}")
        if time.monotonic() > deadline:
            raise ConfigError(
                f"run-config num-clients={m} but only {len(nodes)} SuperNodes connected after {wait_s:.0f}s "
                f"(client-wait-s): start the simulation with --federation-config 'num-supernodes={m}', or set "
                f"num-clients to the number of SuperNodes")
        time.sleep(0.2)


def learn_partitions(grid: Grid, m: int, wait_s: float) -> dict[int, int]:
    """{client id i: node id} for the m clients; a clear error if the nodes do not hold 0..m-1 once each."""
    t0 = time.perf_counter()
    nodes = wait_for_nodes(grid, m, wait_s)
    msgs = [Message(RecordDict(), dst_node_id=n, message_type=QUERY_PARTITION) for n in nodes]
    replies = list(grid.send_and_receive(msgs, timeout=wait_s))
    found: dict[int, int] = {}
    for msg in replies:
        if msg.has_error():
            raise ConfigError(f"SuperNode {msg.metadata.src_node_id} could not say its partition: {msg.error.reason}")
        rec = msg.content.metric_records[METRICS]
        pid, parts = int(rec[PARTITION_ID]), int(rec[NUM_PARTITIONS])
        if parts != m or not 0 <= pid < m:
            raise ConfigError(f"SuperNode {msg.metadata.src_node_id} has partition-id={pid}, num-partitions={parts}, "
                              f"but run-config num-clients={m}: they must agree")
        if pid in found:
            raise ConfigError(f"two SuperNodes ({found[pid]} and {msg.metadata.src_node_id}) both hold "
                              f"partition-id={pid}: give every SuperNode its own partition-id")
        found[pid] = msg.metadata.src_node_id
    missing = sorted(set(range(m)) - set(found))
    if missing:
        raise ConfigError(f"no SuperNode answered for partition-id(s) {missing} within {wait_s:.0f}s (client-wait-s)")
    log.info("learned the partitions of %d SuperNodes in %.2fs", m, time.perf_counter() - t0)
    return found
