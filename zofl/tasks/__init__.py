"""Tasks (data + model + loss) and how a run-config names one.

``load_task(name)``: a built-in name from ``TASKS``, or ``package.module:attr`` where attr is a task
class (checked for the task protocol before it is instantiated), a task object, or a function
marked with ``@task_factory`` (see ``zofl.tasks.base.Task``). Nothing else named by a run-config is
called: ``task = "os:abort"`` is refused, not run.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

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
from .relunet import ReluNetTask, SoftplusNetTask
from .softmax import SoftmaxTask
from .torch_task import CNNTask, TorchSoftmaxTask, TorchTask

TASKS = {"softmax": SoftmaxTask, "relu-net": ReluNetTask, "softplus-net": SoftplusNetTask,
         "hyper-logistic": HyperLogisticTask,
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


def _module_from_file(path: str):
    """The module in the file ``path`` (a task given as 'path/to/file.py:attr'), imported once per process
    under its file name's stem; a relative path is relative to the current folder (``zofl run`` makes it
    absolute, so that every process of the run finds the same file)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ImportError(f"no such file: {file}")
    name = f"zofl_task_{file.stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(file):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_task(name: str) -> Task:
    """The task named ``name``; raises TaskError naming the key ``task`` and what is allowed."""
    if name in TASKS:
        return TASKS[name]()
    if ":" not in name:
        raise TaskError(f"task must be one of {sorted(TASKS)}, an import path 'package.module:attr' or "
                        f"'path/to/file.py:attr', got {name!r}")
    module_name, _, attr = name.rpartition(":")
    try:
        module = _module_from_file(module_name) if module_name.endswith(".py") else \
            importlib.import_module(module_name)
        obj = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise TaskError(f"task {name!r} cannot be imported: {exc}") from exc
    except Exception as exc:  # the module itself raised (a SyntaxError, its own checks)
        raise TaskError(f"task {name!r} cannot be imported: {type(exc).__name__}: {exc}") from exc
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
           "RegularizationTask", "ReluNetTask", "SoftmaxTask", "SoftplusNetTask", "SplitTask", "Task",
           "TaskError", "TASKS", "TorchTask", "evaluate", "is_bilevel", "is_hypergrad", "load_task", "task_factory"]
