"""The task protocol: what a strategy needs from data, model and loss.

A task is any object with the methods below (duck typing; ``Task`` is a ``typing.Protocol``).
Parameters are always one flat float64 numpy vector (the paper's x in R^n), so strategies
never look inside a model. Built-in tasks are chosen by the run-config key ``task``; any
``package.module:attr`` path works too, where ``attr`` is a task object or a zero-argument
callable (e.g. a class) that returns one. See docs/architecture.md, "Add a task".

Data: ``SplitTask`` implements the data methods with the paper's splits of the dataset named
by the run-config key ``dataset`` (see ``zofl.tasks.data``); subclass it to reuse them, or
implement ``server_data``/``client_data``/``test_data`` yourself.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .data import (
    NUM_CLASSES,
    NUM_FEATURES,
    ArrayData,
    DataError,
    Pooled,
    SplitError,
    check_available,
    data_cache,
    load_pooled,
    make_splits,
    take,
)
from .sources import PartitionParams, read_local, split_rows


@dataclass(frozen=True)
class DataSpec:
    """Everything that fixes the data of a run; splits are a pure function of it."""

    dataset: str = "digits"
    data_dir: str = ""
    download: bool = False
    num_clients: int = 10  # m
    alpha: float = 1.0  # Dirichlet concentration: large = near-iid, small = skewed
    server_fraction: float = 0.3
    seed: int = 0
    min_partition_size: int = 10
    standardize: bool = False  # features scaled to zero mean, unit variance over the training rows
    stamp: tuple[int, ...] = ()  # the data file's version (``data.file_stamp``): keys the caches below
    # a file of the user's instead of ``dataset`` (run-config data-path; zofl.tasks.sources.read_local) and how to
    # read it; the split scheme (run-config partitioner, zofl.tasks.sources.partition) and the declared shape
    path: str = ""
    read: tuple[tuple[str, str], ...] = ()  # read_local's keyword arguments (label_column, x_key, ...)
    scheme: str = "dirichlet"
    params: tuple[tuple[str, int], ...] = ()  # PartitionParams' fields other than alpha and min_size
    num_features: int = 0  # 0: the data's
    num_classes: int = 0
    fallback: str = "top-up"  # what follows a Dirichlet draw that cannot meet min_partition_size (split-fallback)
    cache: bool = True  # the split kept in <data_dir>/splits/ and memory-mapped (split-cache; tasks/splitcache.py)

    @property
    def name(self) -> str:
        """What the data are called in a summary: the built-in dataset's name, or the file's."""
        return os.path.basename(self.path.rstrip("/")) or self.path if self.path else self.dataset


@runtime_checkable
class Task(Protocol):
    """Data, model and loss/gradient oracles of one learning problem."""

    def check(self, spec: DataSpec) -> None:
        """Raise ValueError (naming the key) if the data cannot be had; called before round 1."""

    def server_data(self, spec: DataSpec) -> ArrayData:
        """The server's own training data (the f1 data of ZO-HFL)."""

    def client_data(self, spec: DataSpec, pid: int) -> ArrayData:
        """Client ``pid``'s data (0 <= pid < spec.num_clients)."""

    def test_data(self, spec: DataSpec) -> ArrayData:
        """Held-out data for the global test accuracy and loss."""

    def num_train(self, spec: DataSpec) -> int:
        """N_train: server plus clients' training examples (for rho_i = N_i / N_train)."""

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        """The initial flat parameter vector x_0 (float64)."""

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """Mean loss of the model ``params`` on examples (x, y)."""

    def grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradient of ``loss`` with respect to ``params`` (flat, float64, a fresh array)."""

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Predicted labels for the rows of x."""


def data_shape(task, spec: DataSpec) -> tuple[int, int]:
    """(num_features, num_classes) of the task's test data, as ``init_params`` gets them: as declared (run-config
    num-features, num-classes) where both are; for a ``SplitTask`` that keeps the built-in data methods, from the
    dataset's name (no file is read: the runner checks every cell with it before any runs); otherwise from
    ``test_data(spec)`` (a file of the user's is read)."""
    if spec.num_features and spec.num_classes:
        return spec.num_features, spec.num_classes
    if isinstance(task, SplitTask) and type(task).test_data is SplitTask.test_data and not spec.path:
        return NUM_FEATURES[spec.dataset], NUM_CLASSES[spec.dataset]
    test = task.test_data(spec)
    return test.x.shape[1], test.num_classes


def pooled_of(spec: DataSpec):
    if spec.path:
        return _file_pooled(spec.path, spec.read, spec.num_features, spec.num_classes, spec.stamp)[0]
    return load_pooled(spec.dataset, spec.data_dir, spec.download)


@data_cache(maxsize=4)
def _file_pooled(path: str, read: tuple, num_features: int, num_classes: int, stamp: tuple) -> tuple:
    """(Pooled: the training rows then the file's own test part if it has one, the client ids of the training rows
    or None, the test part's size) of a file of the user's, read and checked once per process and version."""
    data = read_local(os.path.expanduser(path), num_classes=num_classes or None, num_features=num_features or None,
                      **dict(read))
    x, y = data.x, data.y
    if data.x_test is not None:
        x, y = np.concatenate([data.x, data.x_test]), np.concatenate([data.y, data.y_test])
    k = max(int(y.max()) + 1 if len(y) else 0, num_classes)
    pooled = Pooled(np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64), k, data.fingerprint, data.source)
    return pooled, data.ids, 0 if data.x_test is None else len(data.y_test)


def splits_of(spec: DataSpec):
    """The run's split (a pure function of the data and ``spec``), made once per process; with ``spec.cache``
    made once per machine: kept in <data-dir>/splits/ and memory-mapped (``zofl.tasks.splitcache``)."""
    return _splits(spec)


@data_cache(maxsize=8)
def _splits(spec: DataSpec):
    if not spec.cache or not spec.data_dir:
        return _make(spec)
    from . import splitcache

    if spec.path:
        pooled, _, n_test = _file_pooled(spec.path, spec.read, spec.num_features, spec.num_classes, spec.stamp)
    else:
        pooled, n_test = pooled_of(spec), 0
    fields = {"data": pooled.fingerprint, "rows": len(pooled.y), "n_test": n_test, "read": spec.read,
              "builtin": not spec.path, "scheme": spec.scheme, "m": spec.num_clients, "alpha": spec.alpha,
              "min_size": spec.min_partition_size, "params": spec.params, "server_fraction": spec.server_fraction,
              "seed": spec.seed, "fallback": spec.fallback}
    path = splitcache.index_path(spec.data_dir, spec.name, spec.num_clients, splitcache.split_key(fields))
    return splitcache.cached(path, len(pooled.y), spec.num_clients, lambda: _make(spec))


def _make(spec: DataSpec):
    if not spec.path and spec.scheme == "dirichlet":  # the papers' split of a built-in dataset, as always
        return make_splits(spec.dataset, spec.num_clients, spec.alpha, spec.server_fraction, spec.seed,
                           spec.data_dir, spec.download, spec.min_partition_size, spec.fallback)
    return _scheme_splits(spec)


def _scheme_splits(spec: DataSpec):
    """A file's split, or a built-in dataset's by another scheme than Dirichlet (``sources.split_rows``)."""
    if spec.path:
        pooled, ids, n_test = _file_pooled(spec.path, spec.read, spec.num_features, spec.num_classes, spec.stamp)
    else:
        pooled, ids, n_test = pooled_of(spec), None, 0
    params = PartitionParams(alpha=spec.alpha, min_size=spec.min_partition_size, fallback=spec.fallback,
                             **dict(spec.params))
    return split_rows(pooled.y, ids, n_test, spec.scheme, spec.num_clients, params, spec.server_fraction, spec.seed)


@data_cache(maxsize=8)
def feature_scaling(spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) of every feature over the training rows (the server's and the clients', never the
    test rows); a constant feature gets std 1."""
    pooled, splits = pooled_of(spec), splits_of(spec)
    train = np.concatenate([splits.server, *splits.clients])
    x = pooled.x[train].astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    return mean.astype(np.float32), np.where(std > 1e-8, std, 1.0).astype(np.float32)


def take_rows(spec: DataSpec, idx: np.ndarray) -> ArrayData:
    """Rows ``idx`` of the dataset, standardized when ``spec.standardize``."""
    data = take(pooled_of(spec), idx)
    if not spec.standardize:
        return data
    mean, std = feature_scaling(spec)
    return ArrayData(np.ascontiguousarray((data.x - mean) / std, dtype=np.float32), data.y, data.num_classes)


@data_cache(maxsize=None)
def _client_slice(spec: DataSpec, pid: int) -> ArrayData:
    """Client ``pid``'s rows, copied once per process (Flower rebuilds clients every round)."""
    return take_rows(spec, splits_of(spec).clients[pid])


class SplitTask:
    """Data methods from the paper's splits of ``spec.dataset`` (see ``zofl.tasks.data``)."""

    def check(self, spec: DataSpec) -> None:
        if not spec.path:
            check_available(spec.dataset, spec.data_dir, spec.download)
        try:
            splits_of(spec)  # cached: the split is made once per process anyway
        except DataError:
            raise
        except ValueError as exc:  # the Dirichlet draw gave up
            if spec.scheme != "dirichlet" or spec.path:
                raise SplitError(f"cannot split {spec.name!r} over num-clients={spec.num_clients} by partitioner "
                                 f"{spec.scheme!r}: {exc}") from exc
            raise SplitError(
                f"cannot split {spec.dataset!r} over num-clients={spec.num_clients} with alpha={spec.alpha} so that "
                f"every client holds min-partition-size={spec.min_partition_size} examples ({exc}); lower "
                f"min-partition-size or num-clients, or raise alpha") from exc

    def server_data(self, spec: DataSpec) -> ArrayData:
        return take_rows(spec, splits_of(spec).server)

    def client_data(self, spec: DataSpec, pid: int) -> ArrayData:
        return _client_slice(spec, pid)

    def test_data(self, spec: DataSpec) -> ArrayData:
        return take_rows(spec, splits_of(spec).test)

    def num_train(self, spec: DataSpec) -> int:
        return splits_of(spec).num_train

    def fingerprint(self, spec: DataSpec) -> tuple[str, str]:
        """(fingerprint, source) of this run's data: the dataset's arrays as read from its file and
        the split (test, server and client index arrays), so the same file and split give the same
        fingerprint everywhere. Optional for a task: one without it is not checked."""
        pooled = pooled_of(spec)
        return f"{pooled.fingerprint}-{_split_fingerprint(spec)}", pooled.source


@data_cache(maxsize=8)
def _split_fingerprint(spec: DataSpec) -> str:
    return splits_of(spec).fingerprint()


def evaluate(task: Task, params: np.ndarray, data: ArrayData) -> tuple[float, float]:
    """(mean loss, accuracy) of ``params`` on ``data``."""
    if len(data) == 0:
        return float("nan"), float("nan")
    return float(task.loss(params, data.x, data.y)), float(np.mean(task.predict(params, data.x) == data.y))
