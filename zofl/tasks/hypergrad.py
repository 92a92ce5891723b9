"""Bilevel tasks for hyper-gradient methods (AFBO, FedNest): first- and second-order oracles.

    min_x (1/m) sum_i f_i(x, y*(x)),   y*(x) = argmin_y (1/m) sum_i g_i(x, y),  g_i strongly convex in y.

A task gives, per client i, ``client_oracles(settings, spec, pid) -> Oracles`` (``settings``: the run's
``zofl.settings.TaskSettings``, typed): closures over the
client's data for grad_y g_i, grad_x f_i, grad_y f_i and the products grad^2_yy g_i v (Hessian-vector)
and grad^2_xy g_i v (an x-sized vector), each on a minibatch ``idx`` of the client's lower
(``n_lower``) or upper (``n_upper``) examples; plus ``dims``, ``init_x``, ``init_y`` and
``evaluate(settings, spec, x, y)``. Built in:

* ``hyper-cleaning`` (paper 002, Sec. 5.1, after Franceschi et al. 2017 and FedNest/ADBO): each
  client's examples are split into a training part whose labels are replaced by a uniformly random
  class with probability ``corruption`` and a clean validation part (``holdout-fraction``).
  x holds one weight per training example of every client (client i's slice only matters to
  client i); y is a linear softmax classifier W (features + bias, C classes).
      g_i(x, W) = (1/n_i) sum_{j in train_i} sigmoid(x_j) CE(W; u_j, label~_j) + (lower-l2 / 2)||W||^2
      f_i(x, W) = (1/v_i) sum_{j in val_i} CE(W; u_j, label_j)
  Our choices (the paper gives none): a linear classifier with bias, sigmoid weights, x_0 = 0
  (weight 1/2 for every example), corruption 0.5, lower-l2 = 0.001, splits as every task's
  (Dirichlet ``alpha``: large = IID).
* ``regularization`` (paper 002, Sec. 5.2, after Chen et al. 2022a and ADBO): one L2 coefficient
  per input feature as the upper variable. y is a linear softmax classifier W (features + bias,
  C classes), x_j the log of feature j's coefficient (exp keeps it positive, as in benchopt's
  regularization selection):
      g_i(x, W) = (1/n_i) sum_{j in train_i} CE(W; u_j, label_j) + (1/2) sum_k exp(x_k) ||W_k||^2
                  + (lower-l2 / 2)||W_bias||^2
      f_i(x, W) = (1/v_i) sum_{j in val_i} CE(W; u_j, label_j)
  Our choices (the seed gives none): softmax (Covertype has 7 classes; ADBO's IJCNN1 had 2),
  the log parametrisation, x_0 = log(lower-l2) for every feature, the bias row's fixed
  coefficient lower-l2, validation = ``holdout-fraction`` of each client's examples. The paper
  ran it on Covertype (``dataset = "covtype"``); offline, ``digits`` (64 features) is the default.
* ``zofl.tasks.hypergrad:QuadraticHypergrad``: a small problem with a closed-form solution.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import streams
from ..algorithms.smoothing import seed_sequence
from .base import DataSpec, SplitTask
from .bilevel import holdout_split
from .data import ArrayData, data_cache

STREAM_CORRUPT = streams.CORRUPT
Oracle = Callable[..., np.ndarray]


@dataclass(frozen=True)
class Oracles:
    """Client i's first- and second-order oracles (closures over its data)."""

    grad_y_g: Oracle  # (x, y, idx) -> q
    hvp_yy_g: Oracle  # (x, y, v, idx) -> q: grad^2_yy g_i v
    jvp_xy_g: Oracle  # (x, y, v, idx) -> p: grad^2_xy g_i v
    grad_x_f: Oracle  # (x, y, idx) -> p
    grad_y_f: Oracle  # (x, y, idx) -> q
    n_lower: int  # examples of g_i (idx of grad_y_g, hvp, jvp)
    n_upper: int  # examples of f_i (idx of grad_x_f, grad_y_f)
    num_examples: int


HYPERGRAD_REQUIRED = ("check", "server_data", "test_data", "num_train", "dims", "init_x", "init_y",
                      "client_oracles", "evaluate")


def is_hypergrad(task) -> bool:
    return all(callable(getattr(task, m, None)) for m in HYPERGRAD_REQUIRED)


# -- softmax cross-entropy pieces (W: (d, C); rows of u carry a trailing 1 for the bias) ----------
def _probs(W: np.ndarray, u: np.ndarray) -> np.ndarray:
    z = u @ W
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _residual(W, u, labels):
    """s - e_label per row: the gradient of CE in the logits."""
    r = _probs(W, u)
    r[np.arange(len(labels)), labels] -= 1.0
    return r


def ce_loss(W: np.ndarray, u: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-row cross-entropy."""
    return ce_of_logits(u @ W, labels)


def ce_of_logits(z: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-row cross-entropy of the logits ``z`` (not changed)."""
    z = z - z.max(axis=1, keepdims=True)
    return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(labels)), labels]


@data_cache(maxsize=4)
def _test_rows(spec: DataSpec) -> tuple[np.ndarray, np.ndarray, int]:
    """The test set as the evaluation reads it: rows with a trailing 1 (bias) in float64 (what ``u @ W`` with
    a float64 W computes in anyway), labels, classes; made once (every server step of AFBO evaluates)."""
    test = SplitTask().test_data(spec)
    u = np.hstack([test.x, np.ones((len(test), 1), dtype=test.x.dtype)]).astype(np.float64)
    return u, test.y, test.num_classes


def figures_on_test_set(spec: DataSpec, y: np.ndarray) -> dict[str, float]:
    """Test loss (mean cross-entropy) and accuracy of the linear classifier y on the test set (one product
    ``u @ W``, read for both)."""
    u, labels, classes = _test_rows(spec)
    z = u @ y.reshape(u.shape[1], classes)
    return {"test_loss": float(np.mean(ce_of_logits(z, labels))),
            "test_acc": float(np.mean(np.argmax(z, axis=1) == labels))}


def weighted_ce_grad(W, u, labels, w):
    """grad_W of (1/n) sum_j w_j CE_j."""
    return u.T @ (w[:, None] * _residual(W, u, labels)) / len(labels)


def weighted_ce_hvp(W, u, w, V):
    """grad^2_W of (1/n) sum_j w_j CE_j applied to V: u^T [w (S o Z - S sum_c(S o Z))] / n, Z = u V."""
    S = _probs(W, u)
    SZ = S * (u @ V)
    return u.T @ (w[:, None] * (SZ - S * SZ.sum(axis=1, keepdims=True))) / len(w)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@data_cache(maxsize=None)
def _cleaning_arrays(spec: DataSpec, pid: int, fraction: float, corruption: float):
    """Client pid's (u_train, noisy labels, true labels, u_val, val labels, C) with a bias column."""
    data = SplitTask().client_data(spec, pid)
    lo, up = holdout_split(spec, pid, len(data), fraction)
    u = np.hstack([data.x, np.ones((len(data), 1), dtype=data.x.dtype)]).astype(np.float64)
    labels = data.y.astype(np.int64)
    rng = np.random.default_rng(seed_sequence(spec.seed, pid, STREAM_CORRUPT))
    noisy = labels[lo].copy()
    flip = rng.random(len(lo)) < corruption
    noisy[flip] = rng.integers(data.num_classes, size=int(flip.sum()))
    return u[lo], noisy, labels[lo], u[up], labels[up], data.num_classes


def roc_auc(score: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counted 1/2 (the Mann-Whitney U statistic over
    n_pos n_neg); nan when either class is empty. For hyper-cleaning: score = sigma(x_j), positive = the
    example's label was kept, so 1 = every clean example weighs more than every corrupted one, 0.5 = chance."""
    score, positive = np.asarray(score, dtype=np.float64), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based ranks, ties averaged
    ranks = average_rank[inverse]
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@data_cache(maxsize=4)
def corrupted_mask(spec: DataSpec, fraction: float, corruption: float) -> np.ndarray:
    """True where a training example's noisy label differs from its true one, in x's order (client by client).
    (A label redrawn uniformly can land on the true class: at corruption 0.5 with 10 classes 45% are corrupted.)"""
    mask = np.concatenate([noisy != true for _, noisy, true, _, _, _ in
                           (_cleaning_arrays(spec, i, fraction, corruption) for i in range(spec.num_clients))])
    mask.setflags(write=False)
    return mask


@data_cache(maxsize=4)
def _offsets(spec: DataSpec, fraction: float) -> tuple[int, ...]:
    """Where each client's slice of x starts (x: one weight per training example of every client)."""
    sizes = [len(holdout_split(spec, i, len(SplitTask().client_data(spec, i)), fraction)[0])
             for i in range(spec.num_clients)]
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(sizes)]))


class HyperCleaningTask(SplitTask):
    """Data hyper-cleaning (see the module docstring)."""

    def dims(self, settings, spec: DataSpec) -> tuple[int, int]:
        test = self.test_data(spec)
        return _offsets(spec, settings.holdout_fraction)[-1], (test.x.shape[1] + 1) * test.num_classes

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dims(settings, spec)[0])

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dims(settings, spec)[1])

    def client_oracles(self, settings, spec: DataSpec, pid: int) -> Oracles:
        u_tr, noisy, _, u_val, val_labels, C = _cleaning_arrays(spec, pid, settings.holdout_fraction,
                                                                settings.corruption)
        lo, hi = _offsets(spec, settings.holdout_fraction)[pid:pid + 2]
        d, mu = u_tr.shape[1], settings.lower_l2
        p = _offsets(spec, settings.holdout_fraction)[-1]

        def weights(x, idx):
            return _sigmoid(x[lo:hi][idx])

        def grad_y_g(x, y, idx):
            W = y.reshape(d, C)
            return (weighted_ce_grad(W, u_tr[idx], noisy[idx], weights(x, idx)) + mu * W).reshape(-1)

        def hvp_yy_g(x, y, v, idx):
            W, V = y.reshape(d, C), v.reshape(d, C)
            return (weighted_ce_hvp(W, u_tr[idx], weights(x, idx), V) + mu * V).reshape(-1)

        def jvp_xy_g(x, y, v, idx):
            # d/dx_j <grad_W g_i, V> = sigmoid'(x_j) <u_j (s_j - e_j)^T, V> / |idx| for j in idx
            W, V = y.reshape(d, C), v.reshape(d, C)
            s = weights(x, idx)
            inner = np.sum(_residual(W, u_tr[idx], noisy[idx]) * (u_tr[idx] @ V), axis=1)
            out = np.zeros(p)
            np.add.at(out, lo + idx, s * (1 - s) * inner / len(idx))
            return out

        def grad_x_f(x, y, idx):
            return np.zeros(p)  # f_i does not depend on x

        def grad_y_f(x, y, idx):
            W = y.reshape(d, C)
            return weighted_ce_grad(W, u_val[idx], val_labels[idx], np.ones(len(idx))).reshape(-1)

        return Oracles(grad_y_g, hvp_yy_g, jvp_xy_g, grad_x_f, grad_y_f, len(noisy), len(val_labels),
                       len(noisy) + len(val_labels))

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        # how well x tells corrupted from clean training examples: mean weight of each kind, and the ROC AUC
        # of sigma(x_j) for "label kept" (0.5 = no separation)
        w = _sigmoid(x)
        corrupted = self.corrupted(settings, spec)
        return {**figures_on_test_set(spec, y),
                "weight_corrupted": float(w[corrupted].mean()) if corrupted.any() else float("nan"),
                "weight_clean": float(w[~corrupted].mean()) if not corrupted.all() else float("nan"),
                "weight_auc": roc_auc(w, ~corrupted)}

    def corrupted(self, settings, spec: DataSpec) -> np.ndarray:
        """Which training examples had their label changed (bool, x's order): the truth cleaning should find."""
        return corrupted_mask(spec, settings.holdout_fraction, settings.corruption)


@data_cache(maxsize=None)
def _labelled_arrays(spec: DataSpec, pid: int, fraction: float):
    """Client pid's (u_train, train labels, u_val, val labels, C), rows with a trailing 1 (bias)."""
    data = SplitTask().client_data(spec, pid)
    lo, up = holdout_split(spec, pid, len(data), fraction)
    u = np.hstack([data.x, np.ones((len(data), 1), dtype=data.x.dtype)]).astype(np.float64)
    labels = data.y.astype(np.int64)
    return u[lo], labels[lo], u[up], labels[up], data.num_classes


class RegularizationTask(SplitTask):
    """Per-feature L2 coefficients (see the module docstring)."""

    def dims(self, settings, spec: DataSpec) -> tuple[int, int]:
        test = self.test_data(spec)
        d = test.x.shape[1]
        return d, (d + 1) * test.num_classes

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return np.full(self.dims(settings, spec)[0], np.log(settings.lower_l2))

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dims(settings, spec)[1])

    @staticmethod
    def coefficients(settings, x: np.ndarray) -> np.ndarray:
        """One coefficient per row of W: exp(x_k) for the features, lower-l2 for the bias."""
        return np.append(np.exp(x), settings.lower_l2)

    def client_oracles(self, settings, spec: DataSpec, pid: int) -> Oracles:
        u_tr, labels, u_val, val_labels, C = _labelled_arrays(spec, pid, settings.holdout_fraction)
        d1 = u_tr.shape[1]

        def grad_y_g(x, y, idx):
            W = y.reshape(d1, C)
            lam = self.coefficients(settings, x)[:, None]
            return (weighted_ce_grad(W, u_tr[idx], labels[idx], np.ones(len(idx))) + lam * W).reshape(-1)

        def hvp_yy_g(x, y, v, idx):
            W, V = y.reshape(d1, C), v.reshape(d1, C)
            lam = self.coefficients(settings, x)[:, None]
            return (weighted_ce_hvp(W, u_tr[idx], np.ones(len(idx)), V) + lam * V).reshape(-1)

        def jvp_xy_g(x, y, v, idx):
            # d/dx_k <grad_W g_i, V> = exp(x_k) <W_k, V_k> (the loss term does not depend on x)
            W, V = y.reshape(d1, C), v.reshape(d1, C)
            return np.exp(x) * np.sum(W[:-1] * V[:-1], axis=1)

        def grad_x_f(x, y, idx):
            return np.zeros_like(x)

        def grad_y_f(x, y, idx):
            W = y.reshape(d1, C)
            return weighted_ce_grad(W, u_val[idx], val_labels[idx], np.ones(len(idx))).reshape(-1)

        return Oracles(grad_y_g, hvp_yy_g, jvp_xy_g, grad_x_f, grad_y_f, len(labels), len(val_labels),
                       len(labels) + len(val_labels))

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        return {**figures_on_test_set(spec, y), "mean_log_coef": float(np.mean(x)), "spread_log_coef": float(np.std(x))}


def _no_data(dim: int = 2) -> ArrayData:
    return ArrayData(np.zeros((0, dim), dtype=np.float32), np.zeros(0, dtype=np.int64), 2)


@data_cache(maxsize=4)
def _quadratic_data(seed: int, m: int, dim: int, shared_jacobian: bool) -> tuple[np.ndarray, ...]:
    """(A, B_i, c_i, e_i) of ``QuadraticHypergrad``, drawn from the run's seed; made once per process (every client's
    oracles and every evaluation read them: redrawn each time they were a third of a toy run's time) and read-only."""
    rng = np.random.default_rng(seed_sequence(seed, streams.QUADRATIC))
    Q = rng.normal(size=(dim, dim))
    A = Q @ Q.T / dim + np.eye(dim)
    Bs = rng.normal(size=(m, dim, dim))
    if shared_jacobian:
        Bs[:] = Bs.mean(axis=0)
    cs = rng.normal(size=(m, dim))
    es = rng.normal(size=(m, dim))
    for a in (A, Bs, cs, es):
        a.setflags(write=False)
    return A, Bs, cs, es


class QuadraticHypergrad:
    """A quadratic bilevel problem with closed-form solutions (tests; an example of a task):

        g_i(x, y) = (1/2) y^T A y - y^T (B_i x + e_i),    f_i(x, y) = (1/2)||y - c_i||^2 + (lam/2)||x||^2
        y*(x) = A^{-1} (B x + e),  x* = (M^T M + lam I)^{-1} M^T (c - A^{-1} e),  M = A^{-1} B

    (B, e, c the means over clients). c_i and e_i differ between clients (so local solves drift),
    A is common, and B_i = B for every client unless ``shared_jacobian`` is False. There is no
    sample noise (``idx`` is ignored). p = q = 3.

    With client-specific B_i, a method that averages the clients' *own* hyper-gradients, as AFBO
    does, B_i^T A^{-1} (y - c_i), converges to ``local_average_solution`` instead of x*: the mean
    of the products is not the product of the means (paper 002, Sec. 3.2, difficulty (ii))."""

    dim, lam = 3, 0.5
    shared_jacobian = True

    def _data(self, spec: DataSpec):
        return _quadratic_data(spec.seed, spec.num_clients, self.dim, self.shared_jacobian)

    def solution(self, spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
        """(x*, y*(x*)) of the federated problem."""
        A, Bs, cs, es = self._data(spec)
        M, Ae = np.linalg.solve(A, Bs.mean(axis=0)), np.linalg.solve(A, es.mean(axis=0))
        x = np.linalg.solve(M.T @ M + self.lam * np.eye(self.dim), M.T @ (cs.mean(axis=0) - Ae))
        return x, M @ x + Ae

    def local_average_solution(self, spec: DataSpec) -> np.ndarray:
        """The zero of lam x + mean_i B_i^T A^{-1} (y*(x) - c_i): where averaging local hyper-gradients leads."""
        A, Bs, cs, es = self._data(spec)
        M, Ae = np.linalg.solve(A, Bs.mean(axis=0)), np.linalg.solve(A, es.mean(axis=0))
        rhs = np.mean([B.T @ np.linalg.solve(A, c) for B, c in zip(Bs, cs)], axis=0) - M.T @ Ae
        return np.linalg.solve(M.T @ M + self.lam * np.eye(self.dim), rhs)

    def lipschitz(self, spec: DataSpec) -> float:
        """The largest eigenvalue of grad^2_yy g = A (l_{g,1})."""
        return float(np.linalg.eigvalsh(self._data(spec)[0]).max())

    def check(self, spec: DataSpec) -> None:
        pass

    def server_data(self, spec):
        return _no_data()

    def test_data(self, spec):
        return _no_data()

    def num_train(self, spec) -> int:
        return spec.num_clients

    def dims(self, settings, spec: DataSpec) -> tuple[int, int]:
        return self.dim, self.dim

    def init_x(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dim)

    def init_y(self, settings, spec: DataSpec) -> np.ndarray:
        return np.zeros(self.dim)

    def client_oracles(self, settings, spec: DataSpec, pid: int) -> Oracles:
        A, Bs, cs, es = self._data(spec)
        B, c, e, lam = Bs[pid], cs[pid], es[pid], self.lam
        return Oracles(grad_y_g=lambda x, y, idx: A @ y - B @ x - e,
                       hvp_yy_g=lambda x, y, v, idx: A @ v,
                       jvp_xy_g=lambda x, y, v, idx: -B.T @ v,
                       grad_x_f=lambda x, y, idx: lam * x,
                       grad_y_f=lambda x, y, idx: y - c,
                       n_lower=1, n_upper=1, num_examples=1)

    def evaluate(self, settings, spec: DataSpec, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        xs, ys = self.solution(spec)
        return {"test_loss": float(np.linalg.norm(x - xs)), "test_acc": float("nan"),
                "y_error": float(np.linalg.norm(y - ys))}


class HeterogeneousQuadratic(QuadraticHypergrad):
    """QuadraticHypergrad with a different B_i for every client (see ``local_average_solution``)."""

    shared_jacobian = False
