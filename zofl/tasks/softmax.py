"""The ZO-HFL paper's model (Sec. IV): linear softmax regression with cross-entropy.

x = [x_c]_{c=1..C} in R^{d x C}, p_jc = exp(u_j^T x_c) / sum_h exp(u_j^T x_h), no bias term
(as in the paper), flattened row-major to n = d * C parameters.
"""
from __future__ import annotations

import numpy as np

from .base import SplitTask


def _probs(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    z = x @ W
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


class SoftmaxTask(SplitTask):
    """Linear softmax on any of the built-in datasets (run-config ``dataset``)."""

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        return np.zeros(num_features * num_classes)

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        W = params.reshape(x.shape[1], -1)
        z = x @ W
        z -= z.max(axis=1, keepdims=True)
        logsum = np.log(np.exp(z).sum(axis=1))
        return float(np.mean(logsum - z[np.arange(len(y)), y]))

    def grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        W = params.reshape(x.shape[1], -1)
        p = _probs(W, x)
        p[np.arange(len(y)), y] -= 1.0
        p /= len(y)
        return (x.T @ p).reshape(-1)

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.argmax(x @ params.reshape(x.shape[1], -1), axis=1)
