"""User tasks living outside the package, loaded by import path in tests."""
import functools
import os

import numpy as np

from zofl.tasks import ArrayData, SoftmaxTask, task_factory

TASK = SoftmaxTask()


class BlobsTask(SoftmaxTask):
    """Two Gaussian classes in 4 dimensions (n = 8 parameters): data this test module makes."""

    @staticmethod
    @functools.lru_cache(maxsize=4)
    def _make(seed: int, m: int):
        rng = np.random.default_rng(seed)

        def blob(n):
            y = rng.integers(0, 2, n)
            x = (rng.standard_normal((n, 4)) + np.where(y[:, None] == 1, 1.0, -1.0)).astype(np.float32)
            return ArrayData(x, y, 2)

        return blob(200), [blob(100) for _ in range(m)], blob(400)

    def check(self, spec):
        pass

    def server_data(self, spec):
        return self._make(spec.seed, spec.num_clients)[0] if spec.server_fraction > 0 else ArrayData(
            np.zeros((0, 4), np.float32), np.zeros(0, np.int64), 2)

    def client_data(self, spec, pid):
        return self._make(spec.seed, spec.num_clients)[1][pid]

    def test_data(self, spec):
        return self._make(spec.seed, spec.num_clients)[2]

    def num_train(self, spec):
        return len(self.server_data(spec)) + 100 * spec.num_clients

    def init_params(self, num_features, num_classes):
        w = np.zeros((num_features, num_classes))
        w[:, 0] = 0.5  # starts out predicting the wrong class for nearly every example
        return w.reshape(-1)


class DivergingTask(SoftmaxTask):
    """A gradient that overflows (a model that diverges in x_0's pre-training): for the test that a
    non-finite x_0 is refused before round 1."""

    def grad(self, params, x, y):
        return np.full_like(params, np.inf)


class FailingTask(SoftmaxTask):
    """Passes every start-up check, then fails in the run (the server's first gradient): for the
    test that ``zofl run`` reports a failed run with a non-zero exit code."""

    def grad(self, params, x, y):
        raise RuntimeError("FailingTask: a deliberate failure inside the run")


def _mlp(num_features, num_classes):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(num_features, 32), torch.nn.ReLU(), torch.nn.Linear(32, num_classes))


@task_factory
def make_torch_mlp():
    """A user's own torch model as a task, from a factory function (marked, so a run-config may name it)."""
    from zofl.tasks import TorchTask

    return TorchTask(_mlp)


class Float32InitTask(BlobsTask):
    """BlobsTask whose initial parameters come in float32 (as a torch model's would): x_0 is float64 all
    the same."""

    def init_params(self, d, k):
        return np.full(d * k, 0.01, dtype=np.float32)


class PidTask(SoftmaxTask):
    """The built-in softmax task, noting (in the file ZOFL_TEST_PIDS) the process that reads each client's data."""

    def client_data(self, spec, pid):
        with open(os.environ["ZOFL_TEST_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\n")
        return super().client_data(spec, pid)
