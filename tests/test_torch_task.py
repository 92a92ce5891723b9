"""Tasks from torch models: the same numbers as the numpy softmax, a user's module by import path,
the built-in CNN, the device key."""
import numpy as np
import pytest

from zofl.config import ConfigError
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.setup import prepare


def test_torch_softmax_gives_the_numpy_softmax_numbers():
    _, numpy_task, spec = prepare({"task": "softmax", "num-clients": 4})
    _, torch_task, _ = prepare({"task": "torch-softmax", "num-clients": 4})
    data = numpy_task.client_data(spec, 1)
    n = data.x.shape[1] * data.num_classes
    np.testing.assert_array_equal(torch_task.init_params(data.x.shape[1], data.num_classes), np.zeros(n))
    params = np.random.default_rng(0).normal(size=n)
    x, y = data.x[:32], data.y[:32]
    np.testing.assert_allclose(torch_task.grad(params, x, y), numpy_task.grad(params, x, y), rtol=1e-10, atol=1e-12)
    assert torch_task.loss(params, x, y) == pytest.approx(numpy_task.loss(params, x, y), rel=1e-12)
    np.testing.assert_array_equal(torch_task.predict(params, data.x), numpy_task.predict(params, data.x))


@pytest.mark.parametrize("task", ["tests.plugin_task:make_torch_mlp", "cnn"])
def test_torch_models_learn_with_every_kind_of_strategy(tmp_path, task):
    for strategy in ("fedavg", "zohfl"):
        d, x = run_inprocess({"task": task, "strategy": strategy, "num-clients": 3, "beta": 1.0, "num-rounds": 3,
                              "tau": 3.0, "x0": "zeros", "output-dir": str(tmp_path), "run-name": strategy},
                             workers=0)
        rec = read_rounds(d)
        assert np.isfinite(x).all() and all(np.isfinite(r["test_loss"]) for r in rec)
        if strategy == "fedavg":
            assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.2
        else:  # ZO-HFL's 3 small steps: f1 and the test loss go down (a step up the gradient raises both), and
            # every round's two-point estimates saw f2 > 0 (a penalty of y_i off x)
            assert rec[-1]["f1"] < rec[0]["f1"] and rec[-1]["test_loss"] < rec[0]["test_loss"], rec
            assert all(r["f2_est"] > 0 for r in rec[1:]) and rec[1]["participants"] == 3


def test_zohfl_on_the_torch_softmax_gives_the_numpy_softmax_run():
    """A ZO-HFL run through a torch task: the very numbers (to 1e-10 relative) of the same run on the numpy
    softmax, round by round: f1's gradient, the clients' lower-level solves and the f2 values all go
    through the task's torch code."""
    import tempfile

    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in ("softmax", "torch-softmax"):
            d, x = run_inprocess({"task": task, "num-clients": 3, "beta": 1.0, "num-rounds": 3, "tau": 3.0,
                                  "x0": "zeros", "output-dir": tmp, "run-name": task}, workers=0)
            got[task] = (x, [[r["test_acc"], r["test_loss"], r["f1"], r["f2_est"]] for r in read_rounds(d)])
    (x_np, rec_np), (x_t, rec_t) = got["softmax"], got["torch-softmax"]
    assert np.abs(x_np).max() > 1e-3  # the run moved x
    np.testing.assert_allclose(x_t, x_np, rtol=1e-10, atol=1e-14)
    assert rec_t[0][3] is None and rec_np[0][3] is None
    np.testing.assert_allclose(np.array(rec_t[1:], float), np.array(rec_np[1:], float), rtol=1e-10)
    np.testing.assert_allclose(rec_t[0][:3], rec_np[0][:3], rtol=1e-10)


def test_device_key():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the refusal cannot be shown here")
    with pytest.raises(ConfigError, match="'device'"):
        prepare({"task": "cnn", "device": "cuda"})


def test_the_readme_torch_example_runs(tmp_path, monkeypatch):
    """docs/usage.md's "Bring your own torch model", verbatim, as a task of a FedAvg run."""
    import re
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    code = re.search(r"## Bring your own torch model.*?```python\n(.*?)\n```", readme, re.S).group(1)
    (tmp_path / "mymodels.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mymodels", None)
    d, x = run_inprocess({"task": "mymodels:TASK", "strategy": "fedavg", "num-clients": 3, "beta": 1.0,
                          "num-rounds": 3, "tau": 3.0, "output-dir": str(tmp_path), "run-name": "readme"}, workers=0)
    rec = read_rounds(d)
    assert x.size == 64 * 64 + 64 + 64 * 10 + 10 and rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.2


def test_the_cnn_is_the_documented_two_convolution_network_on_any_image_shape():
    """cnn_module: two 3x3 convolutions (padding 1; 16 then 32 channels), each followed by a ReLU, then 2x2
    max-pooling and max-pooling to 4x4, then one linear layer: 9,930 parameters on MNIST; a square image of
    another size (64 features: 8x8) or CIFAR's 3x32x32 take the same layers; other sizes are refused."""
    torch = pytest.importorskip("torch")
    from zofl.tasks.torch_task import cnn_module, image_shape

    net = cnn_module(784, 10)
    assert [type(m).__name__ for m in net] == ["Unflatten", "Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU",
                                                "AdaptiveMaxPool2d", "Flatten", "Linear"]
    convs = [m for m in net if type(m).__name__ == "Conv2d"]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (1, 16, (3, 3), (1, 1)), (16, 32, (3, 3), (1, 1))]
    assert net[3].kernel_size == 2 and net[6].output_size == 4
    assert sum(p.numel() for p in net.parameters()) == 9_930
    x = torch.randn(5, 784)
    h = net[:4](x)
    assert h.shape == (5, 16, 14, 14)  # the 2x2 pooling halves 28x28
    assert net(x).shape == (5, 10) and bool((net[:3](x) >= 0).all()) and bool((net[:6](x) >= 0).all())
    assert image_shape(64) == (1, 8, 8) and image_shape(3072) == (3, 32, 32) and image_shape(784) == (1, 28, 28)
    assert image_shape(100) == (1, 10, 10) and image_shape(1) == (1, 1, 1)  # any other square: one channel
    assert cnn_module(3072, 10)(torch.randn(2, 3072)).shape == (2, 10)
    with pytest.raises(ValueError, match="the cnn task needs images: 65 features is not a known image shape"):
        image_shape(65)


def test_the_module_and_every_tensor_go_to_the_tasks_device(monkeypatch):
    """With device = cuda the module and every tensor the task makes must sit on the GPU (one left on the CPU is a
    device-mismatch error). This machine has no GPU, and a tensor made with no device lands on the CPU, so a
    dropped device argument would pass every other test here: the module is built on torch's "meta" device
    (shapes only, no data) and must land there, and every tensor the task converts must be asked for its device."""
    import torch

    from zofl.tasks.torch_task import TorchSoftmaxTask, TorchTask, softmax_module

    real, asked = torch.as_tensor, []

    def as_tensor(*a, **k):
        asked.append(k.get("device", "not given"))
        return real(*a, **k)

    for task in (TorchTask(softmax_module, dtype="float64"), TorchSoftmaxTask()):
        task.device = "meta"
        assert {p.device.type for p in task._build(4, 3).parameters()} == {"meta"}
        assert {t.device.type for t in task._params(np.zeros(12)).values()} == {"meta"}
        task.device, task._module = "cpu", None
        task.init_params(4, 3)
        x, y = np.ones((5, 4)), np.arange(5) % 3
        monkeypatch.setattr(torch, "as_tensor", as_tensor)
        task.grad(np.zeros(12), x, y), task.loss(np.zeros(12), x, y), task.predict(np.zeros(12), x)
        monkeypatch.setattr(torch, "as_tensor", real)
        assert len(asked) >= 6 and set(asked) == {"cpu"}, asked
        asked.clear()


def test_a_torch_task_used_before_its_module_is_built_says_what_builds_it():
    """TorchTask's module is built by init_params or configure; anything that needs it before says so in one line.
    A new task computes on the CPU, its labels as torch.long (cross-entropy's class indices)."""
    import torch

    from zofl.tasks.torch_task import TorchTask, softmax_module

    task = TorchTask(softmax_module)
    assert task.device == "cpu"
    with pytest.raises(RuntimeError, match=r"^TorchTask: the module is built by init_params\(num_features, "
                                           r"num_classes\) or configure\(settings, spec\) \(zofl.setup.prepare calls "
                                           r"it\); neither has run$"):
        task.loss(np.zeros(12), np.ones((2, 4)), np.zeros(2, dtype=np.int64))
    task.init_params(4, 3)
    _, labels = task._batch(np.ones((2, 4)), np.array([0, 2], dtype=np.int32))
    assert labels.dtype == torch.long and labels.tolist() == [0, 2]


def test_a_torch_task_runs_on_one_thread_unless_told_otherwise(monkeypatch):
    """configure sets torch's threads to the task's num_threads (1 by default: a simulated client has one CPU);
    num_threads = None leaves torch's own setting alone."""
    import torch

    from zofl.settings import TaskSettings
    from zofl.tasks.torch_task import TorchTask, softmax_module

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    cfg, _, spec = prepare({"task": "torch-softmax", "num-clients": 4})
    assert calls == [1]
    TorchTask(softmax_module, num_threads=3).configure(TaskSettings.of(cfg), spec)
    TorchTask(softmax_module, num_threads=None).configure(TaskSettings.of(cfg), spec)
    assert calls == [1, 3]
