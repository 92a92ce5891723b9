"""FedRZO paper (001), Sec. 5.1: a one-hidden-layer ReLU network on a two-class image task.

Model x = (Z, w), Z in R^{N1 x N0}, w in R^{N1}, output w^T sigma(Z u) with sigma = max(0, .);
loss = mean over examples of (1/2)(v - w^T sigma(Z u))^2 with labels v in {-1, +1}. The L2 term
(lambda/2)(||Z||^2 + ||w||^2) of the paper is added by the strategy (run-config ``l2``), so that
``loss`` is the data term alone.

The two classes (our choice; the paper does not say which): digits 0-4 (v = +1, stored label 0) vs
5-9 (v = -1, stored label 1) of any of the built-in 10-class datasets, split with the usual splits.
N1 = 4 neurons (the paper's; the run-config key ``hidden-units`` sets another width). Parameters are
flattened as [Z row-major, w].

``softplus-net`` (ours, for the first-order methods FedRZO_nn is compared with in the paper's Sec. 5.1):
the same network, data, loss and x_0 with the smooth rectifier sigma(z) = log(1 + e^z) (softplus with
sharpness 1), whose gradient is exact everywhere.
"""
from __future__ import annotations

import numpy as np

from .base import DataSpec, SplitTask
from .data import ArrayData

N1 = 4


def _binary(d: ArrayData) -> ArrayData:
    return ArrayData(d.x, (d.y >= d.num_classes // 2).astype(np.int64), 2)


class ReluNetTask(SplitTask):
    """One-hidden-layer ReLU network, squared loss on labels in {-1, +1}."""

    hidden = N1

    def configure(self, settings, spec: DataSpec) -> None:
        """N1 from the run-config key ``hidden-units`` (``zofl.setup.prepare`` calls it in every process)."""
        self.hidden = settings.hidden_units

    def server_data(self, spec: DataSpec) -> ArrayData:
        return _binary(super().server_data(spec))

    def client_data(self, spec: DataSpec, pid: int) -> ArrayData:
        return _binary(super().client_data(spec, pid))

    def test_data(self, spec: DataSpec) -> ArrayData:
        return _binary(super().test_data(spec))

    def _unpack(self, params: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
        return params[: self.hidden * d].reshape(self.hidden, d), params[self.hidden * d:]

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        rng = np.random.default_rng(0)  # "a random initial point"; fixed so every method starts alike
        return rng.standard_normal(self.hidden * num_features + self.hidden) / np.sqrt(num_features)

    def _output(self, params: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        Z, w = self._unpack(params, x.shape[1])
        pre = x @ Z.T  # (B, N1)
        return pre, self.activation(pre) @ w, w

    @staticmethod
    def activation(pre: np.ndarray) -> np.ndarray:
        """sigma = max(0, .)."""
        return np.maximum(pre, 0.0)

    @staticmethod
    def activation_grad(pre: np.ndarray) -> np.ndarray:
        """sigma' (a subgradient: 0 at 0)."""
        return (pre > 0).astype(pre.dtype)

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        _, out, _ = self._output(params, x)
        v = 1.0 - 2.0 * y  # stored label 0 -> +1, 1 -> -1
        return float(0.5 * np.mean((v - out) ** 2))

    def grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """A subgradient (sigma'(0) = 0), for first-order baselines and tests."""
        pre, out, w = self._output(params, x)
        r = (out - (1.0 - 2.0 * y)) / len(y)  # d loss / d out
        gw = self.activation(pre).T @ r
        gZ = ((r[:, None] * w[None, :]) * self.activation_grad(pre)).T @ x
        return np.concatenate([gZ.reshape(-1), gw])

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        _, out, _ = self._output(params, x)
        return (out < 0).astype(np.int64)  # v = -1 -> stored label 1


class SoftplusNetTask(ReluNetTask):
    """The ReLU network of Sec. 5.1 with sigma(z) = log(1 + e^z): a smooth loss, an exact gradient."""

    @staticmethod
    def activation(pre: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, pre)

    @staticmethod
    def activation_grad(pre: np.ndarray) -> np.ndarray:
        """sigma'(z) = 1 / (1 + e^-z), in the form that does not overflow."""
        return 0.5 * (1.0 + np.tanh(0.5 * pre))
