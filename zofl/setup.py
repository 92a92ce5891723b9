"""Shared start-up of the ServerApp and ClientApp: a run-config becomes (cfg, task, spec), checked."""
from __future__ import annotations

import os
from typing import Any, Mapping

from .config import Config, ConfigError, parse_config
from .core.method import BILEVEL, CONTROL, HYPERGRAD, MODEL
from .methods import METHODS
from .settings import TaskSettings
from .tasks import DataError, DataSpec, Task, TaskError, is_bilevel, is_hypergrad, load_task
from .tasks.base import data_shape
from .tasks.data import DataFileError, SplitError, file_stamp
from .tasks.local import DATA_PATH, LocalTask, NodeData, ServerWithoutData, read_node_data, source_stamp

DATA_FP = "data-fp"  # the work config entry carrying the server's data fingerprint to every client
NEEDS = {  # a method's needs (zofl.core.method.Method.needs): the test of a task, and its words for the error
    MODEL: (lambda t: not is_bilevel(t) and not is_hypergrad(t),
            "a single-level task (softmax, relu-net or a zofl.tasks.base.Task)"),
    BILEVEL: (is_bilevel, "a bilevel task (hyper-logistic, fair-relu or a zofl.tasks.bilevel.BilevelTask)"),
    HYPERGRAD: (is_hypergrad,
                "a hyper-gradient bilevel task (hyper-cleaning, regularization or a zofl.tasks.hypergrad task)"),
}


def data_spec(cfg: Config) -> DataSpec:
    path = cfg.data_path.strip()
    read = (("label_column", cfg.label_column.strip()), ("feature_columns", cfg.feature_columns.strip() or None),
            ("x_key", cfg.x_key.strip()), ("y_key", cfg.y_key.strip()),
            ("id_column", cfg.client_column.strip() or None))
    params = (("classes_per_client", cfg.classes_per_client), ("shards_per_client", cfg.shards_per_client),
              ("group_size", cfg.group_size))
    return DataSpec(dataset=cfg.dataset, data_dir=os.path.expanduser(cfg.data_dir),
                    download=cfg.download, num_clients=cfg.num_clients, alpha=cfg.alpha,
                    server_fraction=cfg.server_fraction, seed=cfg.seed, min_partition_size=cfg.min_partition_size,
                    standardize=cfg.standardize, stamp=data_stamp(cfg), path=path, read=read if path else (),
                    scheme=cfg.partitioner, params=params, num_features=cfg.num_features, num_classes=cfg.num_classes,
                    fallback=cfg.split_fallback, cache=cfg.split_cache)


def data_stamp(cfg) -> tuple:
    """The version of the run's data file (the caches' key: a file replaced in place is read and checked again):
    data-path's, or the built-in dataset's; () for a loader or a path that cannot be read (its check names it)."""
    path = cfg.data_path.strip()
    try:
        if not path:
            return file_stamp(cfg.dataset, os.path.expanduser(cfg.data_dir))
        return source_stamp(path)
    except (OSError, ValueError):
        return ()


def check_run(run_config: Mapping[str, Any]) -> tuple[Config, Task, DataSpec]:
    """Every check of a run that reads no data: the run-config, the task (imported, of the kind the
    strategy needs) and the method's own rules (``Method.check``, at most the data's shape). The
    runner (zofl.compare) calls it for every cell of a grid before any cell runs; raises ConfigError
    naming the key."""
    cfg = parse_config(run_config)
    task = _task(cfg)
    spec = data_spec(cfg)
    METHODS[cfg.strategy].server.check(cfg, task, spec)
    if cfg.server_data == "none":
        _check_without_server_data(cfg, task)
    return cfg, task, spec


def _check_without_server_data(cfg: Config, task: Task) -> None:
    """What needs the server's data refuses server-data = none, naming the key to change (a ConfigError)."""
    server = METHODS[cfg.strategy].server
    if server.kind == CONTROL:
        why = f"strategy {cfg.strategy!r} is a server-side control: it trains on the server's data"
    elif server.needs_server_data:  # the method's own reason (ZO-HFL's f1)
        why = server.needs_server_data
    elif server.needs != MODEL:
        why = f"task {cfg.task!r} is bilevel: its upper level is evaluated on the server's data"
    elif cfg.x0 == "pretrained":
        why = "x0 = 'pretrained' trains x_0 on the server's data (set x0 = 'zeros')"
    else:
        why = None
    if why:
        raise ConfigError(f"run-config key 'server-data' = 'none': {why}; the server reads no data with it "
                          f"(docs/data.md: which methods need server data and why)")


def prepare_server(run_config: Mapping[str, Any]) -> tuple[Config, Task, DataSpec]:
    """``prepare`` for the ServerApp: with server-data = none the run-config is checked and the task configured
    without reading any data (``tasks.local.ServerWithoutData``: the declared features and classes, no examples)."""
    cfg, task, spec = check_run(run_config)
    if cfg.server_data != "none":
        return prepare(run_config)
    if spec.path and not (spec.num_features and spec.num_classes):
        raise ConfigError("run-config keys 'num-features'/'num-classes': with server-data = 'none' the server reads no "
                          "file, so the shape of data-path's data must be declared (both > 0)")
    _configure(cfg, task, spec)
    return cfg, ServerWithoutData(task, *data_shape(task, spec)), spec


def prepare(run_config: Mapping[str, Any]) -> tuple[Config, Task, DataSpec]:
    """Validate the run-config, load the task and check its data; raise ConfigError naming the key."""
    cfg = parse_config(run_config)
    task = _task(cfg)
    spec = data_spec(cfg)
    try:
        task.check(spec)
    except DataFileError as exc:  # the file itself: its message starts with the path
        where = "'data-path'" if spec.path else f"'data-dir' (dataset {cfg.dataset!r})"
        raise ConfigError(f"run-config key {where}: {exc}") from exc
    except SplitError as exc:  # the file is fine; the split asked of it cannot be made
        raise ConfigError(f"run-config keys 'num-clients'/'partitioner'/'alpha'/'min-partition-size'/'split-fallback': "
                          f"{exc}") from exc
    except (DataError, ValueError) as exc:  # no such dataset, or its file is missing or unreadable
        if spec.path:
            raise ConfigError(f"run-config key 'data-path' (read with label-column, feature-columns, x-key, y-key, "
                              f"client-column): {exc}") from exc
        raise ConfigError(f"run-config keys 'dataset'/'data-dir': {exc}") from exc
    _check_declared(spec, task)
    _configure(cfg, task, spec)
    return cfg, task, spec


def _check_declared(spec: DataSpec, task: Task) -> None:
    """The run's data have the shape run-config num-features / num-classes declare, where they declare one."""
    if not (spec.num_features or spec.num_classes):
        return
    test = task.test_data(spec)
    for key, declared, actual in (("num-features", spec.num_features, test.x.shape[1]),
                                  ("num-classes", spec.num_classes, test.num_classes)):
        if declared and declared != actual:
            raise ConfigError(f"run-config key '{key}' = {declared}, but the run's data ({spec.name}) have {actual}")


def _configure(cfg: Config, task: Task, spec: DataSpec) -> None:
    if callable(getattr(task, "configure", None)):  # e.g. a TorchTask: device and module
        try:
            task.configure(TaskSettings.of(cfg), spec)
        except ValueError as exc:
            raise ConfigError(str(exc) if "run-config key" in str(exc) else f"run-config key 'task': {exc}") from exc


def prepare_local(run_config: Mapping[str, Any]) -> tuple[Config, Task, DataSpec, tuple[int, int]]:
    """``prepare`` for a client whose node config names its own data (``zofl.tasks.local``): the run-config
    validated and the task loaded and configured, with the (features, classes) the node's data must have (the
    task's, from the dataset's name for the built-in data: the run's dataset is never read here); a ConfigError
    naming the key. ``local_task`` then reads the node's data."""
    cfg, task, spec = check_run(run_config)
    if is_bilevel(task) or is_hypergrad(task):
        raise ConfigError(f"node config key '{DATA_PATH}': a node's own data work with single-level tasks "
                          f"(softmax, relu-net, a torch model or a zofl.tasks.base.Task), not task={cfg.task!r}")
    _configure(cfg, task, spec)
    return cfg, task, spec, data_shape(task, spec)


def local_task(cfg: Config, task: Task, shape: tuple[int, int], node: NodeData) -> LocalTask:
    """``task`` with the node's own data as its client's, read and checked against ``shape`` (``NodeDataError``
    naming the node config key); the read is cached per process and version of the node's files."""
    num_features, num_classes = shape
    return LocalTask(task, read_node_data(node, num_features, num_classes, cfg.seed), num_classes)


def _task(cfg: Config) -> Task:
    """The run's task, of the kind its strategy needs (a ConfigError naming the key 'task' otherwise)."""
    try:
        task = load_task(cfg.task)
    except TaskError as exc:
        raise ConfigError(f"run-config key 'task': {exc}") from exc

    fits, need = NEEDS[METHODS[cfg.strategy].server.needs]
    if not fits(task):
        raise ConfigError(f"run-config key 'task': strategy={cfg.strategy!r} needs {need}, got task={cfg.task!r}")
    if cfg.federated_eval and METHODS[cfg.strategy].server.needs != MODEL:
        raise ConfigError(f"run-config key 'federated-eval': the clients evaluate a model of a single-level task "
                          f"(x on their held-out data); strategy={cfg.strategy!r} solves a bilevel problem, whose "
                          f"metrics the server computes; set federated-eval = false")
    return task


def data_identity(task: Task, spec: DataSpec) -> dict[str, str] | None:
    """{"fingerprint", "source"} of the run's data (``SplitTask.fingerprint``: the arrays as read and
    the split), or None for a task that does not give one. Stored with the run (data.json), checked
    on resume and by every client against its own."""
    fingerprint = getattr(task, "fingerprint", None)
    if not callable(fingerprint):
        return None
    fp, source = fingerprint(spec)
    return {"fingerprint": fp, "source": source, "dataset": spec.name}


def check_data(expected: str | None, task: Task, spec: DataSpec, pid: int) -> None:
    """A client's check of the server's data fingerprint against its own (``DataMismatch``)."""
    if not expected:
        return
    own = data_identity(task, spec)
    if own is not None and own["fingerprint"] != expected:
        raise DataMismatch(f"client {pid}: its data differ from the server's: {own['dataset']!r} read from "
                           f"{own['source']} with this run's split has fingerprint {own['fingerprint']}, the "
                           f"server's is {expected} (a different file, data-dir or split); it refuses to train")


class DataMismatch(ConfigError):
    """A client's data are not the server's (``check_data``)."""
