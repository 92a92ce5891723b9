"""Many clients per simulated SuperNode (run-config ``clients-per-node``): which node serves which clients.

Flower's simulation costs grow with its SuperNodes: every 0.1 s it asks each node for a message, and each ask
walks every stored message (issue 51: 146 s to learn the node map of 10,000 nodes). With k clients per node,
a simulation of m clients runs K = ceil(m / k) SuperNodes; node j (its node config's partition-id = j,
num-partitions = K, as Flower's simulation sets them) serves clients j k .. min(m, (j + 1) k) - 1. Every message
names its client (``zofl.strategies.wire.APP_CLIENT_ID``); the client's work, speed, faults, failures and state are
its own, as with one node per client, so every number is the same.

``auto`` (``clients-per-node = 0``) keeps one node per client up to ``AUTO_NODES`` clients (every run as before)
and beyond that at most ``AUTO_NODES`` nodes. The simulation's own ClientApp shares nodes on every engine and
strategy: the Message API's messages name their client, the legacy API's ClientProxy is a client of a node
(``strategies.legacy.ClientOnNode``), Flower's own FedAvg samples clients (``strategies.flwr_fedavg``), and with
server-data = none a node reports the size and fingerprint of each client of its share. A user's own App keeps one
client per node: its ClientApp is the user's, and holds one client's data.
Pure functions of their arguments.
"""
from __future__ import annotations

AUTO_NODES = 100  # auto: one node per client up to this many clients, at most this many nodes beyond


def clients_per_node(m: int, key: int) -> int:
    """k, the clients each simulated SuperNode serves: ``key`` when it is >= 1, else (auto) 1 up to AUTO_NODES
    clients and ceil(m / AUTO_NODES) beyond."""
    if key >= 1:
        return min(key, m)
    return 1 if m <= AUTO_NODES else -(-m // AUTO_NODES)


def num_nodes(m: int, k: int) -> int:
    """K = ceil(m / k): the simulated SuperNodes that serve m clients, k each (the last maybe fewer)."""
    return -(-m // k)


def share(j: int, m: int, k: int) -> range:
    """The clients node j serves: j k .. min(m, (j + 1) k) - 1."""
    return range(j * k, min(m, (j + 1) * k))


def node_of(client: int, k: int) -> int:
    """The index j of the node (its partition-id) that serves ``client``."""
    return client // k
