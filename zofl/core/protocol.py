"""The wire protocol: what goes to a client and back, in one place.

A round (or, in the asynchronous engine, a task) sends each client one ``Work``: named arrays
(``x`` = the global model, plus what the method needs, e.g. SCAFFOLD's ``c``) and config entries
(``round``: the seed of the client's randomness, ``H``: its local steps, plus method entries such
as FedRZO_bl's ``phase``). The client answers with one ``Reply``: named arrays, its number of
examples and metrics (``steps``, ``compute_s``, ``wall_s``, ``speed``, ``handle_s``).

Flower carries them in three ways, all defined here and nowhere else:
* Message API: a ``RecordDict`` {"arrays": ArrayRecord(named arrays), "config": ConfigRecord}
  to the client and {"arrays": ArrayRecord, "metrics": MetricRecord(+ "num-examples")} back:
  Flower's own convention, so Flower's built-in strategies can read our replies.
* ``NumPyClient.fit(parameters, config)``: arrays in the order named by the config entry
  ``arrays`` (comma-separated), and the reply's metric ``arrays`` names the returned list.
* the legacy API's ``FitIns`` / ``FitRes``: the NumPyClient form inside Flower's legacy records.

Message types: ``train`` carries work (``train.<action>`` is free for methods with several kinds of
rounds); ``query.partition`` asks a node which partition (client id i) it holds, without any work.

Seed streams: every random draw comes from ``seed_sequence(seed, ..., stream)``
(``zofl.algorithms.smoothing``); every stream is registered once in ``zofl.streams``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import numpy as np

Scalar = Union[bool, int, float, str]

TRAIN = "train"
QUERY_PARTITION = "query.partition"
ARRAYS = "arrays"  # the RecordDict key of the arrays, and the config entry naming them in order
CONFIG = "config"
METRICS = "metrics"
NUM_EXAMPLES = "num-examples"  # Flower's default weighting key
PARTITION_ID = "partition-id"  # node config key (simulation and deployment)
NUM_PARTITIONS = "num-partitions"


@dataclass
class Work:
    """What the server sends one client: the client id, named arrays and config entries."""

    pid: int
    round: int  # the round (sync) or task number (async) that seeds the client's randomness
    H: int  # local steps (0 for a straggler)
    arrays: dict[str, np.ndarray]
    config: dict[str, Scalar] = field(default_factory=dict)

    def full_config(self) -> dict[str, Scalar]:
        """The config entries as sent: round, H, the array names in order, then the method's."""
        return {"round": self.round, "H": self.H, ARRAYS: ",".join(self.arrays), **self.config}

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


@dataclass
class Reply:
    """A client's answer: named arrays, its number of examples and its metrics."""

    pid: int
    arrays: dict[str, np.ndarray]
    num_examples: int
    metrics: dict[str, Scalar] = field(default_factory=dict)
    H: int | None = None  # the local steps its work asked for: set by the server's engine (0: a straggler's)

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


#: what went wrong with a sampled client (the totals of the failure policy count each kind):
#: "late" no reply before the deadline; "error" the client raised (or crashed); "rejected" a reply
#: came but failed the checks (``core.checks``); "lost" its SuperNode is gone or no SuperNode holds
#: its partition
FAILURE_KINDS = ("late", "error", "rejected", "lost")


@dataclass
class Failure:
    """A client that raised, timed out or whose reply was unusable: who, why and which kind."""

    pid: int | None
    reason: str
    kind: str = "error"  # one of FAILURE_KINDS

    @property
    def rejected(self) -> bool:
        return self.kind == "rejected"


# -- the NumPyClient form (positional arrays + config) --------------------------------------
def work_to_numpy(work: Work) -> tuple[list[np.ndarray], dict[str, Scalar]]:
    return list(work.arrays.values()), work.full_config()


def work_from_numpy(pid: int, parameters: list[np.ndarray], config: Mapping[str, Scalar]) -> Work:
    """Decode NumPyClient work; without the ``arrays`` entry (Flower's own strategies) one array is ``x``."""
    names = [n for n in str(config.get(ARRAYS, "")).split(",") if n] or (["x"] if len(parameters) == 1 else [])
    if len(names) != len(parameters):
        raise ValueError(f"work for client {pid}: {len(parameters)} arrays but names {names}")
    extra = {k: v for k, v in config.items() if k not in ("round", "H", ARRAYS)}
    if "round" not in config or "H" not in config:
        raise ValueError(f"work for client {pid}: config {dict(config)} lacks 'round' or 'H'")
    return Work(pid, int(config["round"]), int(config["H"]), dict(zip(names, parameters)), extra)


def reply_to_numpy(reply: Reply) -> tuple[list[np.ndarray], int, dict[str, Scalar]]:
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
