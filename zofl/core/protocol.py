"""The wire protocol: what goes to a client and back, in one place.

A round (or, in the asynchronous engine, a task) sends each client one ``Work``: named arrays
(``x`` = the global model, plus what the method needs, e.g. SCAFFOLD's ``c``) and config entries
(``round``: the seed of the client's randomness, ``H``: its local steps, plus method entries such
as FedRZO_bl's ``phase``). The client answers with one ``Reply``: named arrays, its number of
examples and metrics (``steps``, ``compute_s``, ``wall_s``, ``speed``, ``handle_s``).

How Flower carries them (Message API records, and the NumPyClient form inside the legacy API's
FitIns / FitRes) is ``zofl.strategies.wire``'s, and nobody else's.

Message types: ``train`` carries work (``train.<action>`` is free for methods with several kinds of
rounds); ``query.partition`` asks a node which partition (client id i) it holds, without any work;
``evaluate`` asks a client to evaluate x_r on its held-out data (federated evaluation, ``zofl.core.evaluation``).

Seed streams: every random draw comes from ``seed_sequence(seed, ..., stream)``
(``zofl.algorithms.smoothing``); every stream is registered once in ``zofl.streams``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

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
# query.partition's answer of a node with data of its own (zofl.tasks.local): its training size (NUM_EXAMPLES), its
# fingerprint and shape, or why its data cannot be used; the server reads them (zofl.strategies.nodes) with bounds
DATA_FINGERPRINT, NUM_FEATURES_KEY, NUM_CLASSES_KEY = "data-fingerprint", "num-features", "num-classes"
DATA_ERROR = "data-error"
# a refused SuperNode's "held by" (zofl.strategies.nodes.Federation.refused; the summary names the reason): its
# claim is no partition of this run, or its own data cannot be used
NO_PARTITION, NO_DATA = -1, -2
MAX_FINGERPRINT = 128  # characters of a fingerprint a node reports or data.json keeps (array_fingerprint's: 16-64)
MAX_DATA_ERROR = 2000  # characters of the reason a node gives
MAX_EXAMPLES = 2**40  # a reported N_i (or held-out count) above this is no size a node can hold (4 GiB of rows)
EVALUATE = "evaluate"  # federated evaluation (zofl.core.evaluation): x in "arrays", the round in "config"
EVAL_LOSS = "eval_loss"  # an evaluate reply's metrics, beside NUM_EXAMPLES (the names of Flower's templates)
EVAL_ACC = "eval_acc"


@dataclass
class Work:
    """What the server sends one client: the client id, named arrays and config entries."""

    pid: int
    round: int  # the round (sync) or task number (async) that seeds the client's randomness
    H: int  # local steps (0 for a straggler)
    arrays: dict[str, np.ndarray]
    config: dict[str, Scalar] = field(default_factory=dict)

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


@dataclass
class Reply:
    """A client's answer: named arrays, its number of examples and its metrics."""

    pid: int
    arrays: dict[str, np.ndarray]
    num_examples: int
    metrics: dict[str, Scalar] = field(default_factory=dict)

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
