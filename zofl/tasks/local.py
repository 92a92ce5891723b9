"""A SuperNode's own data (issue 48): its node config names it, its ClientApp reads it, the server never learns where.

Flower's convention for what differs between SuperNodes is the node config (``flower-supernode --node-config
"partition-id=0 num-partitions=3 data-path=/srv/site-a/train.parquet"``). The keys (``NODE_KEYS``):

* ``data-path``: a ``.npz``, ``.parquet`` or ``.csv`` file, a folder written by Hugging Face ``datasets``'
  ``save_to_disk``, or a ``module:function`` loader (``zofl.tasks.sources.read_local`` reads and checks it);
* ``data-format``: ``auto`` (from the suffix) or one of ``sources.FORMATS``;
* ``label-column``, ``feature-columns`` (comma-separated; empty: every other numeric column): tables and folders;
  ``x-key``, ``y-key``: a .npz's arrays;
* ``test-path`` (a held-out file in the same format, for federated evaluation) or else ``test-fraction`` of the
  examples drawn as the held-out part by the run's seed (a .npz with Keras-style ``x_test``/``y_test`` keeps its own).

``NodeData.of`` parses them (None: the node has no data of its own and takes its partition of the run's dataset, as
before); ``read_node_data`` reads and checks the data against the run's declared number of features and classes,
once per process and version of the files; ``LocalTask`` is the run's task with this data as the client's: its model
methods are the task's, its ``client_data`` the node's training part, its ``test_data`` the node's held-out part, and
it has no server data (a client never needs the server's). What a node tells the server about its data is its size
and fingerprint (``summary``): never the path, never a row.

Choices (docs/data.md): the held-out part is drawn once per node by the run's seed, so that a resumed run evaluates on
the same examples; features are used as stored (no standardisation: the server holds no statistics of a client's
data, and sending them would tell it more than the protocol does).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..core.protocol import DATA_FINGERPRINT, NUM_CLASSES_KEY, NUM_EXAMPLES, NUM_FEATURES_KEY
from .data import TEST_FRACTION, ArrayData, DataError, array_fingerprint, data_cache, path_stamp
from .sources import FORMATS, LocalData, read_local, split_test

DATA_PATH = "data-path"
NODE_KEYS = {  # node-config key -> NodeData field
    DATA_PATH: "path", "data-format": "fmt", "label-column": "label_column", "feature-columns": "feature_columns",
    "x-key": "x_key", "y-key": "y_key", "test-path": "test_path", "test-fraction": "test_fraction",
}
MAX_VALUE_LEN = 4096  # characters of a node-config string (a path is at most PATH_MAX = 4096 bytes on Linux)


class NodeDataError(DataError):
    """A node's data (or its node config) cannot be used; the message names the key or the file."""


@dataclass(frozen=True)
class NodeData:
    """A SuperNode's data, as its node config names it (see the module docstring)."""

    path: str
    fmt: str = "auto"
    label_column: str = "label"
    feature_columns: str = ""
    x_key: str = "x"
    y_key: str = "y"
    test_path: str = ""
    test_fraction: float = TEST_FRACTION

    @classmethod
    def of(cls, node_config: Mapping[str, Any]) -> NodeData | None:
        """The node's data from its node config, None when it names none (no ``data-path`` nor any other key of
        ``NODE_KEYS``); a value of the wrong kind is a NodeDataError naming the key."""
        given = {k: node_config[k] for k in NODE_KEYS if k in node_config}
        if not given:
            return None
        if DATA_PATH not in given:
            raise NodeDataError(f"node config key(s) {sorted(given)} given without '{DATA_PATH}'")
        fields: dict[str, Any] = {}
        for key, value in given.items():
            name = NODE_KEYS[key]
            if name == "test_fraction":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
                    raise NodeDataError(f"node config key 'test-fraction' must be a number in (0, 1), got {value!r}")
                fields[name] = float(value)
                continue
            if not isinstance(value, str) or len(value) > MAX_VALUE_LEN or "\0" in value:
                raise NodeDataError(f"node config key {key!r} must be a string of at most {MAX_VALUE_LEN} "
                                    f"characters, got {str(value)[:80]!r}")
            fields[name] = value.strip()
        if not fields["path"]:
            raise NodeDataError(f"node config key '{DATA_PATH}' is empty")
        if fields.get("fmt", "auto") not in ("auto", *FORMATS):
            raise NodeDataError(f"node config key 'data-format' must be 'auto' or one of {FORMATS}, "
                                f"got {fields['fmt']!r}")
        for key in ("label-column", "x-key", "y-key"):
            if key in given and not fields[NODE_KEYS[key]]:
                raise NodeDataError(f"node config key {key!r} is empty")
        return cls(**fields)


def source_stamp(path: str) -> tuple:
    """(mtime ns, size) of a file or folder path, () for a loader or a missing path: keys the cache below, so a file
    replaced in place is read (and checked) again (a node's data-path, and a run's)."""
    if ":" in path and not os.path.exists(path):
        return ()
    return path_stamp(os.path.expanduser(path))


def read_node_data(nd: NodeData, num_features: int, num_classes: int, seed: int) -> LocalData:
    """The node's data, read and checked (``sources.read_local``: bounded, regular files, finite numbers, integer
    labels in [0, num_classes), ``num_features`` features), with its held-out part; cached per process and version
    of its files. Every refusal is one line naming the node config key and the file."""
    test_stamp = source_stamp(nd.test_path) if nd.test_path else ()
    return _read(nd, source_stamp(nd.path), test_stamp, num_features, num_classes, seed)


@data_cache(maxsize=4)
def _read(nd: NodeData, stamp: tuple, test_stamp: tuple, num_features: int, num_classes: int, seed: int) -> LocalData:
    columns = nd.feature_columns or None

    def one(path: str, key: str) -> LocalData:
        try:
            return read_local(os.path.expanduser(path), fmt=nd.fmt, x_key=nd.x_key, y_key=nd.y_key,
                              label_column=nd.label_column, feature_columns=columns, num_classes=num_classes,
                              num_features=num_features)
        except (DataError, ValueError) as exc:
            raise NodeDataError(f"node config key {key!r}: {exc}") from exc

    data = one(nd.path, DATA_PATH)
    if nd.test_path:
        test = one(nd.test_path, "test-path")
        return dataclasses.replace(data, x_test=test.x, y_test=test.y,
                                   fingerprint=array_fingerprint(np.frombuffer(
                                       (data.fingerprint + test.fingerprint).encode(), np.uint8)))
    try:
        return split_test(data, nd.test_fraction, seed)
    except (DataError, ValueError) as exc:
        raise NodeDataError(f"node config key 'test-fraction': {exc}") from exc


def summary(data: LocalData) -> dict[str, Any]:
    """What a node tells the server of its data: its training size N_i, its fingerprint, and its shape (already
    checked by the node against the run's; the server reads the size and fingerprint). Never a path or a row."""
    return {NUM_EXAMPLES: int(len(data.y)), DATA_FINGERPRINT: data.fingerprint,
            NUM_FEATURES_KEY: int(data.num_features), NUM_CLASSES_KEY: int(data.num_classes)}


class LocalTask:
    """``task`` with a node's own data as its client's: ``client_data`` is the node's training part (whatever the
    partition id), ``test_data`` its held-out part, no server data; every other attribute is the task's."""

    def __init__(self, task: Any, data: LocalData, num_classes: int):
        self.task, self.data, self.num_classes = task, data, num_classes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def check(self, spec) -> None:
        """Nothing to check: the node's data were checked when read."""

    def client_data(self, spec, pid: int) -> ArrayData:
        return ArrayData(self.data.x, self.data.y, self.num_classes)

    def test_data(self, spec) -> ArrayData:
        return ArrayData(self.data.x_test, self.data.y_test, self.num_classes)

    def server_data(self, spec) -> ArrayData:
        return ArrayData(self.data.x[:0], self.data.y[:0], self.num_classes)

    def num_train(self, spec) -> int:
        return int(len(self.data.y))

    def fingerprint(self, spec) -> tuple[str, str]:
        return self.data.fingerprint, "this node's own data"


class ServerWithoutData:
    """``task`` on a server that reads no data (run-config server-data = none): no server share, an empty test set
    of the declared shape (so x_0 has its size and the server's metrics are null), no examples of its own (every
    N_i is a client's report), no fingerprint to send; every model method is the task's."""

    fingerprint = None  # the clients have nothing of the server's to check their data against

    def __init__(self, task: Any, num_features: int, num_classes: int):
        self.task = task
        self.empty = ArrayData(np.zeros((0, num_features), np.float32), np.zeros(0, np.int64), num_classes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def check(self, spec) -> None:
        """Nothing to check: the server reads no data."""

    def server_data(self, spec) -> ArrayData:
        return self.empty

    def test_data(self, spec) -> ArrayData:
        return self.empty

    def num_train(self, spec) -> int:
        return 0
