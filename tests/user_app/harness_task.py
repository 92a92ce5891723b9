"""The user App's model and data as a zofl task (tests/test_user_app.py): the same method through zofl's own harness
(``run_inprocess``, as ``zofl run``) on the same data, to compare with the user's App. Not part of the App."""
import numpy as np
from userapp.task import Net, make_partition

from zofl.tasks import ArrayData, TorchTask


def _train(pid: int) -> ArrayData:
    x, y = make_partition(pid)
    cut = int(0.75 * len(y))  # userapp.task.load_data's train part, in its dataset's order
    return ArrayData(x[:cut], y[:cut], 4)


class UserAppTask(TorchTask):
    """Net on each partition's train part; no server data, the test set partition 99's."""

    fingerprint = None

    def __init__(self):
        super().__init__(lambda *_: Net())

    def check(self, spec) -> None:
        pass

    def server_data(self, spec) -> ArrayData:
        return ArrayData(np.zeros((0, 1, 16, 16), np.float32), np.zeros(0, np.int64), 4)

    def client_data(self, spec, pid: int) -> ArrayData:
        return _train(pid)

    def test_data(self, spec) -> ArrayData:
        return _train(99)

    def num_train(self, spec) -> int:
        return sum(len(_train(i)) for i in range(spec.num_clients))


# a class, not an instance: the server and each client make their own (an instance would share one torch module
# between the server's evaluation and an in-thread client's steps, which the asynchronous engine runs at once)
TASK = UserAppTask
