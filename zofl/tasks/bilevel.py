"""Bilevel and minimax tasks for FedRZO_bl (paper 001, Sec. 4-5): what the strategy needs from a problem.

A bilevel task gives, per client i, its upper objective f~_i(x, y, xi) and the gradient in y of its
lower objective h~_i(x, y, xi~) as closures over the client's data (``client_problem``), the
dimensions and starting points of x and y, the projection onto the upper set X, and the test
metrics of a pair (x, y). A minimax task (``MinimaxTask``) gives f_i and grad_y f_i only: its lower
level is h_i = -f_i (Sec. 4.2), so y(x) maximises the mean f_i. Like plain tasks, bilevel tasks
are chosen by the run-config key ``task`` (a built-in name or ``package.module:attr``).

Built-in tasks:
* ``hyper-logistic`` (Sec. 5.2): federated hyperparameter learning. Binary labels v in {-1, +1}
  (digits 0-4 vs 5-9, as the ReLU task); y in R^d the logistic model (no bias, as the paper);
  x in R^m the per-client L2 coefficients; X = {x >= x-min 1} (the paper's mu).
    h_i(x, y) = mean over client i's training part of log(1 + exp(-v u^T y)) + (x_i / 2)||y||^2
    f_i(x, y) = mean over client i's held-out part of log(1 + exp(-v u^T y))
  Our choices: a client's partition is split at random into training (lower) and held-out (upper)
  examples, 30% held out (run-config ``holdout-fraction``); means instead of the paper's sums (the sums make the upper
  objective scale with N_i, see docs/fedrzo.md); x_0 = ``hyper-x0`` 1 projected onto X (default
  0.1; the paper: "random").
* ``fair-relu`` (Sec. 5.3): fair classification as minimax. x = the ReLU network of Sec. 5.1,
  y in R^C weights of the C class groups (the dataset's 10 original classes; the label to predict
  is binary, 0-4 vs 5-9):
    f_i(x, y) = sum_c y_c L_{i,c}(x) - (lambda_y / 2)||y||^2 + (l2 / 2)||x||^2,
  L_{i,c}(x) = (1 / N_i) sum over client i's class-c examples of (1/2)(v - net_x(u))^2 (so with
  y = 1 the sum is the plain mean loss). The paper prints the sum over groups without y_c; we
  read the weights in from "max over y" and from its reference [39]. lambda_y = ``y-l2``; y_0 = 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from .. import streams
from ..algorithms.smoothing import seed_sequence
from .base import DataSpec, SplitTask
from .data import ArrayData, data_cache
from .relunet import ReluNetTask

UpperFn = Callable[[np.ndarray, np.ndarray, np.ndarray], float]
LowerGrad = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
STREAM_HOLDOUT = streams.HOLDOUT


@dataclass(frozen=True)
class ClientProblem:
    """Client i's two objectives as closures over its data; ``idx`` index the matching part."""

    f: UpperFn  # f~_i(x, y, idx), idx into the upper (held-out) examples
    n_upper: int
    lower_grad: LowerGrad  # grad_y h~_i(x, y, idx), idx into the lower (training) examples
    n_lower: int
    num_examples: int


@runtime_checkable
class BilevelTask(Protocol):
    """``settings`` below is the run's ``zofl.settings.TaskSettings`` (typed: settings.x_min,
    settings.holdout_fraction, ...), the task's keys and nothing else of the run-config."""

    def check(self, spec: DataSpec) -> None: ...
    def server_data(self, spec: DataSpec) -> ArrayData: ...
    def test_data(self, spec: DataSpec) -> ArrayData: ...
    def num_train(self, spec: DataSpec) -> int: ...

    def dims(self, spec: DataSpec) -> tuple[int, int]:
        """(n, n~): the sizes of x and y."""

    def init_x(self, settings, spec: DataSpec) -> np.ndarray: ...
    def init_y(self, settings, spec: DataSpec) -> np.ndarray: ...

    def project_x(self, x: np.ndarray, settings) -> np.ndarray:
        """P_X(x), the upper-level set of the problem (identity if X = R^n)."""

    def client_problem(self, settings, spec: DataSpec, pid: int) -> ClientProblem: ...

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Test metrics of (x, y); always ``test_loss`` and ``test_acc`` (nan where meaningless)."""


BILEVEL_REQUIRED = ("check", "server_data", "test_data", "num_train", "dims", "init_x", "init_y", "project_x",
                    "client_problem", "evaluate")


def is_bilevel(task) -> bool:
    return all(callable(getattr(task, m, None)) for m in BILEVEL_REQUIRED)


def _signs(y: np.ndarray, num_classes: int) -> np.ndarray:
    """Binary target v: +1 for the lower half of the classes (0-4), -1 for the upper half."""
    return np.where(y < num_classes // 2, 1.0, -1.0)


def holdout_split(spec: DataSpec, pid: int, n: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) row indices of a client's n examples: a seeded split, ``fraction`` held out."""
    perm = np.random.default_rng(seed_sequence(spec.seed, pid, STREAM_HOLDOUT)).permutation(n)
    k = min(n - 1, max(1, int(round(fraction * n))))
    return np.sort(perm[k:]), np.sort(perm[:k])


def logistic_loss(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> float:
    """mean log(1 + exp(-v u^T y))."""
    return float(np.mean(np.logaddexp(0.0, -v * (u @ y))))


def logistic_grad(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    z = -v * (u @ y)
    s = np.exp(-np.logaddexp(0.0, -z))  # sigmoid(z)
    return u.T @ (-v * s) / len(v)


@data_cache(maxsize=None)
def _hyper_arrays(cls: type, spec: DataSpec, pid: int, fraction: float):
    """Client pid's (u, v) of its training and held-out parts, made once per process."""
    data = cls().client_data(spec, pid)
    lo, up = holdout_split(spec, pid, len(data), fraction)
    v = _signs(data.y, data.num_classes)
    return data.x[lo], v[lo], data.x[up], v[up], len(data)


@data_cache(maxsize=4)
def _test_arrays(cls: type, spec: DataSpec):
    """The test set's features, binary targets v and class labels, loaded once per process."""
    test = cls().test_data(spec)
    return test.x, _signs(test.y, test.num_classes), test.y, test.num_classes


class HyperLogisticTask(SplitTask):
    """Federated hyperparameter learning (paper 001, Sec. 5.2); see the module docstring."""

    def dims(self, spec: DataSpec) -> tuple[int, int]:
        return spec.num_clients, _test_arrays(type(self), spec)[0].shape[1]

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return self.project_x(np.full(spec.num_clients, settings.hyper_x0), settings)

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dims(spec)[1])

    def project_x(self, x: np.ndarray, settings) -> np.ndarray:
        return np.maximum(x, settings.x_min)

    def client_problem(self, settings, spec: DataSpec, pid: int) -> ClientProblem:
        u_lo, v_lo, u_up, v_up, num_examples = _hyper_arrays(type(self), spec, pid, settings.holdout_fraction)

        def f(x, y, idx):
            return logistic_loss(y, u_up[idx], v_up[idx])

        def lower_grad(x, y, idx):
            return logistic_grad(y, u_lo[idx], v_lo[idx]) + x[pid] * y

        return ClientProblem(f, len(v_up), lower_grad, len(v_lo), num_examples)

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        u, v, _, _ = _test_arrays(type(self), spec)
        z = u @ y
        return {"test_loss": float(np.mean(np.logaddexp(0.0, -v * z))),
                "test_acc": float(np.mean(np.where(z >= 0, 1.0, -1.0) == v)),
                "x_mean": float(np.mean(x)), "x_min_value": float(np.min(x))}


class MinimaxTask:
    """min_x max_y (1/m) sum_i f_i(x, y) through FedRZO_bl: the lower level is h_i = -f_i (Sec. 4.2).

    A subclass gives ``client_upper(settings, spec, pid) -> (f, grad_y f, n, num_examples)``; both levels
    use the same data (D~_i = D_i, Corollary 1)."""

    def client_upper(self, settings, spec: DataSpec, pid: int):
        raise NotImplementedError

    def client_problem(self, settings, spec: DataSpec, pid: int) -> ClientProblem:
        f, grad_y_f, n, num_examples = self.client_upper(settings, spec, pid)
        return ClientProblem(f, n, minimax_lower_grad(grad_y_f), n, num_examples)


def minimax_lower_grad(grad_y_f: LowerGrad) -> LowerGrad:
    """grad_y h_i for h_i = -f_i."""
    return lambda x, y, idx: -grad_y_f(x, y, idx)


class FairReluTask(MinimaxTask, SplitTask):
    """Fair classification minimax (paper 001, Sec. 5.3); see the module docstring."""

    net = ReluNetTask()  # the network of Sec. 5.1: its parameters, x_0 and output

    def dims(self, spec: DataSpec) -> tuple[int, int]:
        u, _, _, C = _test_arrays(type(self), spec)
        return self.net.hidden * u.shape[1] + self.net.hidden, C

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return self.net.init_params(_test_arrays(type(self), spec)[0].shape[1], 2)

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.ones(self.dims(spec)[1])

    def project_x(self, x: np.ndarray, settings) -> np.ndarray:
        return x  # X = R^n

    def _output(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.net._output(x, u)[1]

    def group_losses(self, x: np.ndarray, u: np.ndarray, labels: np.ndarray, num_classes: int,
                     total: int) -> np.ndarray:
        """L_c = (1 / total) sum over the rows of class c of (1/2)(v - net_x(u))^2, for every class c."""
        per = 0.5 * (_signs(labels, num_classes) - self._output(x, u)) ** 2
        return np.bincount(labels, weights=per, minlength=num_classes) / total

    def client_upper(self, settings, spec: DataSpec, pid: int):
        data = self.client_data(spec, pid)
        C, lam_y, l2 = data.num_classes, settings.y_l2, settings.l2

        def f(x, y, idx):
            L = self.group_losses(x, data.x[idx], data.y[idx], C, len(idx))
            return float(y @ L) - 0.5 * lam_y * float(y @ y) + 0.5 * l2 * float(x @ x)

        def grad_y_f(x, y, idx):
            return self.group_losses(x, data.x[idx], data.y[idx], C, len(idx)) - lam_y * y

        return f, grad_y_f, len(data), len(data)

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """The test set's loss and accuracy, and the worst group's (class's) accuracy: a class with no test row
        counts as 0 (nothing shows it is served); y's largest and smallest weight (the adversary's spread)."""
        u, v, labels, C = _test_arrays(type(self), spec)
        out = self._output(x, u)
        correct = np.where(out >= 0, 1.0, -1.0) == v
        per_group = np.bincount(labels, weights=correct, minlength=C) / np.maximum(np.bincount(labels, minlength=C), 1)
        return {"test_loss": float(np.mean(0.5 * (v - out) ** 2)), "test_acc": float(np.mean(correct)),
                "worst_group_acc": float(per_group.min()), "y_max": float(np.max(y)), "y_min": float(np.min(y))}
