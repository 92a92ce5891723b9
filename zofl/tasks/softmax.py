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


EVAL_ROWS = 4096  # arrays at least this long (the test set, the server's data) are kept in float64


class SoftmaxTask(SplitTask):
    """Linear softmax on any of the built-in datasets (run-config ``dataset``)."""

    def _float64(self, x: np.ndarray) -> np.ndarray:
        """x in float64, converted once for the large arrays evaluated every round.

        ``x @ W`` with float32 x and float64 W converts x to float64 anyway, on every call: on
        CIFAR-10's test set that conversion was a third of each round's evaluation. Keeping the
        converted copy (at most 4 per task object) gives the same numbers bit for bit."""
        if x.dtype == np.float64 or len(x) < EVAL_ROWS:
            return x
        cache: dict[int, tuple[np.ndarray, np.ndarray]] = self.__dict__.setdefault("_float64_copies", {})
        hit = cache.get(id(x))
        if hit is None or hit[0] is not x:  # (holding x keeps its id from being reused)
            if len(cache) >= 4:
                cache.clear()
            hit = cache[id(x)] = (x, x.astype(np.float64))
        return hit[1]

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        return np.zeros(num_features * num_classes)

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        W = params.reshape(x.shape[1], -1)
        z = self._float64(x) @ W
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
        return np.argmax(self._float64(x) @ params.reshape(x.shape[1], -1), axis=1)
