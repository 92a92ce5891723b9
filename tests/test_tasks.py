"""Tasks: the softmax oracles and the plug-in mechanism."""
import numpy as np
import pytest

from zofl.tasks import SoftmaxTask, TaskError, load_task


def test_softmax_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    x, y = rng.random((20, 6)).astype(np.float32), rng.integers(0, 4, 20)
    task, w = SoftmaxTask(), rng.standard_normal(24) * 0.3
    g = task.grad(w, x, y)
    eps = 1e-6
    fd = np.array([(task.loss(w + eps * e, x, y) - task.loss(w - eps * e, x, y)) / (2 * eps) for e in np.eye(24)])
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-7)
    assert task.loss(np.zeros(24), x, y) == pytest.approx(np.log(4))


def test_builtin_and_import_path():
    assert isinstance(load_task("softmax"), SoftmaxTask)
    assert isinstance(load_task("zofl.tasks.softmax:SoftmaxTask"), SoftmaxTask)  # a class is instantiated
    assert isinstance(load_task("tests.plugin_task:TASK"), SoftmaxTask)  # an object is used as it is


@pytest.mark.parametrize("name,match", [("nope", "must be one of"), ("no.such.module:X", "cannot be imported"),
                                        ("zofl.tasks:TASKS", "lacks the methods")])
def test_bad_task_names(name, match):
    with pytest.raises(TaskError, match=match):
        load_task(name)
