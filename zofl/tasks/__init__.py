"""Tasks (data + model + loss) and how a run-config names one.

``load_task(name)``: a built-in name from ``TASKS``, or ``package.module:attr`` where attr is a task
class (checked for the task protocol before it is instantiated), a task object, or a function
marked with ``@task_factory`` (see ``zofl.tasks.base.Task``). Nothing else named by a run-config is
called: ``task = "os:abort"`` is refused, not run.
"""
from __future__ import annotations

import importlib

from .base import DataSpec, SplitTask, Task, evaluate
from .bilevel import BILEVEL_REQUIRED, BilevelTask, ClientProblem, FairReluTask, HyperLogisticTask, is_bilevel
from .data import ArrayData, DataError
from .hypergrad import (
    HYPERGRAD_REQUIRED,
    HyperCleaningTask,
    Oracles,
    QuadraticHypergrad,
    RegularizationTask,
    is_hypergrad,
)
from .relunet import ReluNetTask
from .softmax import SoftmaxTask
from .torch_task import CNNTask, TorchSoftmaxTask, TorchTask

TASKS = {"softmax": SoftmaxTask, "relu-net": ReluNetTask, "hyper-logistic": HyperLogisticTask,
         "fair-relu": FairReluTask, "hyper-cleaning": HyperCleaningTask,
         "regularization": RegularizationTask, "torch-softmax": TorchSoftmaxTask, "cnn": CNNTask}
BILEVEL_TASKS = ("hyper-logistic", "fair-relu")
HYPERGRAD_TASKS = ("hyper-cleaning", "regularization")
REQUIRED = ("check", "server_data", "client_data", "test_data", "num_train", "init_params", "loss", "grad", "predict")


class TaskError(ValueError):
    pass


def task_factory(fn):
    """Mark a function that returns a task, so a run-config may name it (``task = "pkg.mod:fn"``)."""
    fn.zofl_task_factory = True
    return fn


def _protocol_problem(obj) -> list[str]:
    """The task-protocol methods ``obj`` (a class or an object) lacks; [] if it provides one protocol."""
    if is_bilevel(obj) or is_hypergrad(obj):
        return []
    return [m for m in REQUIRED if not callable(getattr(obj, m, None))]


def _make(name: str, factory) -> Task:
    """``factory()``, its failure a TaskError naming the task (e.g. a Protocol class, or one whose
    constructor needs arguments)."""
    try:
        return factory()
    except Exception as exc:
        raise TaskError(f"task {name!r} cannot be made without arguments: {type(exc).__name__}: {exc}") from exc


def load_task(name: str) -> Task:
    """The task named ``name``; raises TaskError naming the key ``task`` and what is allowed."""
    if name in TASKS:
        return TASKS[name]()
    if ":" not in name:
        raise TaskError(f"task must be one of {sorted(TASKS)} or an import path 'package.module:attr', got {name!r}")
    module_name, _, attr = name.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskError(f"task {name!r} cannot be imported: {exc}") from exc
    protocols = (f"the methods {list(REQUIRED)} of zofl.tasks.base.Task (or {list(BILEVEL_REQUIRED)} of "
                 f"zofl.tasks.bilevel.BilevelTask, or {list(HYPERGRAD_REQUIRED)} of zofl.tasks.hypergrad)")
    if isinstance(obj, type):  # a class: checked before it is instantiated
        missing = _protocol_problem(obj)
        if missing:
            raise TaskError(f"task {name!r} is a class without {missing}: a task needs {protocols}")
        task = _make(name, obj)
    elif getattr(obj, "zofl_task_factory", False):
        task = _make(name, obj)
    elif not _protocol_problem(obj):
        return obj  # a task object
    else:
        kind = "a function" if callable(obj) else f"a {type(obj).__name__}"
        raise TaskError(f"task {name!r} is {kind}, not a task: name a task class, a task object, or a function "
                        f"marked with @zofl.tasks.task_factory (nothing else named by a run-config is called)")
    missing = _protocol_problem(task)
    if missing:
        raise TaskError(f"task {name!r} made an object without {missing}: a task needs {protocols}")
    return task


__all__ = ["ArrayData", "BilevelTask", "ClientProblem", "DataError", "DataSpec", "FairReluTask", "HyperCleaningTask",
           "HyperLogisticTask", "Oracles", "QuadraticHypergrad",
           "RegularizationTask", "ReluNetTask", "SoftmaxTask", "SplitTask", "Task",
           "TaskError", "TASKS", "TorchTask", "evaluate", "is_bilevel", "is_hypergrad", "load_task", "task_factory"]
