"""Tasks: the softmax oracles and the plug-in mechanism."""
import sys

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
                                        ("zofl.tasks:TASKS", "is a dict, not a task"),
                                        ("os:abort", "is a function, not a task"),
                                        ("tempfile:mkdtemp", "is a function, not a task"),
                                        ("zofl.tasks.data:ArrayData", "is a class without")])
def test_bad_task_names(name, match):
    with pytest.raises(TaskError, match=match):
        load_task(name)


def test_nothing_named_by_a_run_config_is_called_before_it_is_checked(tmp_path, monkeypatch):
    """`os:abort` would end this process and `tempfile:mkdtemp` make a folder if they were called."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(TaskError):
        load_task("tempfile:mkdtemp")
    assert list(tmp_path.iterdir()) == []
    task = load_task("tests.plugin_task:make_torch_mlp")  # a marked factory is called
    assert callable(task.grad)


def test_softmax_keeps_large_arrays_in_float64_with_the_same_numbers():
    from zofl.tasks.softmax import EVAL_ROWS

    rng = np.random.default_rng(0)
    task, w = SoftmaxTask(), rng.standard_normal(30)
    x = rng.standard_normal((EVAL_ROWS, 3)).astype(np.float32)
    y = rng.integers(0, 10, EVAL_ROWS)
    W = w.reshape(3, -1)
    z = x @ W  # what the loss computed before: numpy converts x to float64 on every call
    z -= z.max(axis=1, keepdims=True)
    plain = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(EVAL_ROWS), y]))
    for _ in range(2):  # the second call uses the kept copy
        assert task.loss(w, x, y) == plain
        np.testing.assert_array_equal(task.predict(w, x), np.argmax(x @ W, axis=1))
    assert len(task._float64_copies) == 1
    for _ in range(5):  # at most 4 arrays kept
        task.loss(w, x.copy(), y)
    assert len(task._float64_copies) <= 4


def test_the_server_task_of_a_users_app_holds_x0_and_no_data():
    """ModelArrays (the server's task when the model is a user's own and the data stay on the clients): x_0 as
    given, in float64, a copy each time; empty data everywhere; no examples, no fingerprint; asking it for a loss,
    gradient or prediction is an error that says why (the server holds no data)."""
    from zofl.tasks.arrays import ModelArrays

    x0 = np.arange(6, dtype=np.float32)
    task = ModelArrays(x0)
    got = task.init_params(64, 10)
    assert got.dtype == np.float64 and np.array_equal(got, x0)
    got[0] = 99.0
    assert task.init_params(64, 10)[0] == 0.0  # a copy: the run's x cannot change x_0
    for data in (task.server_data(None), task.test_data(None), task.client_data(None, 3)):
        assert len(data.y) == 0 and data.x.shape[0] == 0
        # ArrayData's contract (float32 features, int64 labels, a class count), empty
        assert (data.x.dtype, data.y.dtype, data.num_classes) == (np.float32, np.int64, 1)
    assert task.num_train(None) == 0 and task.fingerprint is None and task.check(None) is None
    for f in (task.loss, task.grad, task.predict):
        with pytest.raises(RuntimeError, match="^the server of a user's App holds no data: the loss is the clients'$"):
            f(got, None, None)


def test_a_bilevel_task_on_a_users_server_starts_from_flowers_initial_arrays_in_float64():
    """WithInitialX: x_0 is the arrays Flower was handed, in float64 whatever their dtype, a copy each time;
    everything else is the wrapped task's."""
    from zofl.tasks.arrays import WithInitialX
    from zofl.tasks.toy import QuadraticBilevel

    x0 = np.array([0.5, -1.25], dtype=np.float32)
    task = WithInitialX(QuadraticBilevel(), x0)
    got = task.init_x(None, None)
    assert got.dtype == np.float64 and np.array_equal(got, x0)
    got[0] = 9.0
    assert task.init_x(None, None)[0] == 0.5
    assert task.rho == QuadraticBilevel.rho and task.dims(None) == (2, 2)


def test_a_task_file_is_imported_once_per_process_and_a_same_named_file_elsewhere_is_its_own(tmp_path):
    """'path/to/file.py:attr': the file runs once per process however often it is named (a second load gets the
    same module, its module-level state kept), while a file of the same name in another folder is another module;
    while it runs, the module is in sys.modules (a dataclass in it needs that)."""
    for folder, value in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mine.py").write_text(
            "from dataclasses import dataclass\n\nfrom zofl.tasks import SoftmaxTask\n\nRUNS = []\nRUNS.append(1)\n\n\n"
            f"@dataclass\nclass Mine(SoftmaxTask):\n    value: int = {value}\n")
    first = load_task(f"{tmp_path / 'a' / 'mine.py'}:Mine")
    again = load_task(f"{tmp_path / 'a' / 'mine.py'}:Mine")
    assert type(first) is type(again) and sys.modules[type(first).__module__].RUNS == [1]
    other = load_task(f"{tmp_path / 'b' / 'mine.py'}:Mine")
    assert (first.value, again.value, other.value) == (1, 1, 2)
    assert load_task(f"{tmp_path / 'a' / 'mine.py'}:Mine").value == 1  # and back: a's file again, its own module


def test_task_factory_marks_the_function_it_returns():
    """task_factory marks a function as one a run-config may name (load_task calls it: test_nothing_named_by_a_run_
    config_is_called_before_it_is_checked; an unmarked one is refused: test_bad_task_names)."""
    from zofl.tasks import task_factory

    def make():
        return SoftmaxTask()

    assert task_factory(make) is make and make.zofl_task_factory is True
