"""The server's task when the model is a user's own and the data stay on the clients (``zofl.strategies.app``).

The server of a user's App knows the model only as the arrays Flower hands it (x_0: ``initial_arrays``) and holds
no data: no server share (ZO-HFL's grad f1 is 0, as with server-fraction = 0), no test set (the round records'
test metrics are null; the user's own ``evaluate_fn`` and ClientApp evaluate), N_i as each client reports it.
"""
from __future__ import annotations

import numpy as np

from .data import ArrayData


class ModelArrays:
    """A task with x_0 given and no data (see the module docstring); the clients' task is the user's model
    (``zofl.client.ModelTask``)."""

    fingerprint = None  # nothing of the server's for a client to check its data against

    def __init__(self, x0: np.ndarray):
        self.x0 = np.asarray(x0, dtype=np.float64)
        self.empty = ArrayData(np.zeros((0, 1), np.float32), np.zeros(0, np.int64), 1)

    def check(self, spec) -> None:
        """Nothing to check: the server reads no data."""

    def init_params(self, num_features: int, num_classes: int) -> np.ndarray:
        return self.x0.copy()

    def server_data(self, spec) -> ArrayData:
        return self.empty

    def test_data(self, spec) -> ArrayData:
        return self.empty

    def client_data(self, spec, pid: int) -> ArrayData:
        """No client's data are here (``Method.n_train`` counts each client's reported N_i in full)."""
        return self.empty

    def num_train(self, spec) -> int:
        return 0

    def loss(self, params, x, y) -> float:
        raise RuntimeError("the server of a user's App holds no data: the loss is the clients'")

    grad = predict = loss


class WithInitialX:
    """A user's task of zofl's bilevel protocol (``zofl.tasks.bilevel`` / ``zofl.tasks.hypergrad``) on the server of
    their App, whose x_0 is the ``initial_arrays`` Flower was handed (``init_x``); everything else is the task's."""

    def __init__(self, task, x0: np.ndarray):
        self.task, self.x0 = task, np.asarray(x0, dtype=np.float64)

    def __getattr__(self, name: str):
        return getattr(self.task, name)

    def init_x(self, settings, spec) -> np.ndarray:
        return self.x0.copy()
