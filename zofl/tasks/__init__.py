"""Tasks (data + model + loss) and how a run-config names one.

``load_task(name)``: a built-in name from ``TASKS``, or ``package.module:attr`` where attr is a
task object or a zero-argument callable returning one (see ``zofl.tasks.base.Task``).
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
    is_factory = isinstance(obj, type) or (callable(obj) and not all(hasattr(obj, m) for m in REQUIRED)
                                           and not is_bilevel(obj) and not is_hypergrad(obj))
    task = obj() if is_factory else obj
    missing = [m for m in REQUIRED if not callable(getattr(task, m, None))]
    if missing and not is_bilevel(task) and not is_hypergrad(task):
        raise TaskError(f"task {name!r} lacks the methods {missing} of zofl.tasks.base.Task (or the methods "
                        f"{list(BILEVEL_REQUIRED)} of zofl.tasks.bilevel.BilevelTask, or "
                        f"{list(HYPERGRAD_REQUIRED)} of zofl.tasks.hypergrad)")
    return task


__all__ = ["ArrayData", "BilevelTask", "ClientProblem", "DataError", "DataSpec", "FairReluTask", "HyperCleaningTask",
           "HyperLogisticTask", "Oracles", "QuadraticHypergrad",
           "RegularizationTask", "ReluNetTask", "SoftmaxTask", "SplitTask", "Task",
           "TaskError", "TASKS", "TorchTask", "evaluate", "is_bilevel", "is_hypergrad", "load_task"]
