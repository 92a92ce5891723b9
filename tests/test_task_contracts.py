"""What the built-in tasks hand a user: record keys, label dtypes and class counts, example counts, and the torch
tasks' numbers on modules and parameters the other tests do not take (tests from run E's survivors in zofl/tasks)."""
import numpy as np
import pytest

from zofl.tasks.data import ArrayData


def test_the_relu_tasks_labels_and_the_bilevel_targets_split_any_class_count_alike():
    """relunet._binary (relu-net's stored labels: 0 for the lower half of the classes, 1 for the upper, int64, two
    classes) and bilevel._signs (fair-relu's and hyper-logistic's targets v: +1 / -1) cut the classes at the same
    place, also for an odd class count (a data-path file may declare 3 or 5 classes), so that v = 1 - 2 * label."""
    from zofl.tasks.bilevel import _signs
    from zofl.tasks.relunet import _binary

    for classes in range(2, 8):
        y = np.arange(classes, dtype=np.int64)
        got = _binary(ArrayData(np.zeros((classes, 1), np.float32), y, classes))
        assert got.y.dtype == np.int64 and got.num_classes == 2
        assert got.y.tolist() == [int(c >= classes // 2) for c in range(classes)]
        np.testing.assert_array_equal(_signs(y, classes), 1.0 - 2.0 * got.y)
    assert _signs(np.arange(3), 3).tolist() == [1.0, -1.0, -1.0]


def _identity_net(hidden: int = 4) -> np.ndarray:
    """ReLU-network parameters on one feature whose output is the feature itself: relu(u) - relu(-u)."""
    Z = np.zeros((hidden, 1))
    Z[0, 0], Z[1, 0] = 1.0, -1.0
    w = np.zeros(hidden)
    w[0], w[1] = 1.0, -1.0
    return np.concatenate([Z.reshape(-1), w])


def test_the_relu_network_predicts_int64_labels_and_takes_the_zero_subgradient_at_a_kink():
    """predict: stored label 1 where the output is negative, as int64 (the labels' dtype); sigma'(0) = 0 as
    documented, so a unit whose pre-activation is exactly 0 gets no gradient in its row of Z."""
    from zofl.tasks.relunet import ReluNetTask

    task = ReluNetTask()
    u = np.array([[2.0], [-0.5], [0.0]], np.float32)
    pred = task.predict(_identity_net(), u)
    assert pred.dtype == np.int64 and pred.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(ReluNetTask.activation_grad(np.array([-1.0, 0.0, 2.0])), [0.0, 0.0, 1.0])
    params = np.concatenate([np.zeros(4), np.ones(4)])  # Z = 0: every pre-activation is 0; w = 1
    g = task.grad(params, np.array([[1.0], [3.0]], np.float32), np.array([0, 1]))
    np.testing.assert_array_equal(g, np.zeros(8))  # sigma(0) = 0 and sigma'(0) = 0


def test_fair_relus_worst_group_is_exact_for_a_class_of_one_test_row():
    """A class with a single test row, classified right, has accuracy 1 (1 of 1), not 1/2: with every row right the
    worst group's accuracy is 1."""
    from zofl.tasks.bilevel import FairReluTask

    class Small(FairReluTask):  # one feature; classes 0 (one row) and 1 (two rows)
        def test_data(self, spec):
            return ArrayData(np.array([[1.0], [-1.0], [-2.0]], np.float32), np.array([0, 1, 1]), 2)

    got = Small().evaluate(None, None, _identity_net(), np.array([0.25, 0.75]))
    assert got == pytest.approx({"test_loss": float(np.mean(0.5 * (np.array([1.0, -1.0, -1.0]) - [1, -1, -2]) ** 2)),
                                 "test_acc": 1.0, "worst_group_acc": 1.0, "y_max": 0.75, "y_min": 0.25})


def test_hyper_logistic_reports_the_mean_and_the_smallest_l2_coefficient_under_their_names():
    """HyperLogisticTask.evaluate's record: test loss and accuracy of y, and x's mean and minimum as x_mean and
    x_min_value (the names the rounds file carries)."""
    from zofl.tasks.bilevel import HyperLogisticTask

    class Small(HyperLogisticTask):
        def test_data(self, spec):
            return ArrayData(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), np.array([0, 1]), 2)

    got = Small().evaluate(None, None, np.array([0.5, 0.25, 2.0]), np.array([1.0, -1.0]))
    assert got == pytest.approx({"test_loss": float(np.log1p(np.exp(-1.0))), "test_acc": 1.0,
                                 "x_mean": 0.916666666666, "x_min_value": 0.25})


def test_regularization_counts_a_clients_examples_and_names_its_coefficients_figures():
    """RegularizationTask: a client's num_examples (its N_i in the reply) is its training plus its held-out
    examples, its whole partition, whatever holdout-fraction (more than half held out included); evaluate reports
    x's mean and spread as mean_log_coef and spread_log_coef beside the test figures."""
    from zofl.config import parse_config
    from zofl.setup import prepare
    from zofl.tasks.base import SplitTask
    from zofl.tasks.hypergrad import RegularizationTask

    for fraction in (0.3, 0.6):
        cfg = parse_config({"strategy": "fednest", "task": "regularization", "num-clients": 3, "server-fraction": 0.0,
                            "holdout-fraction": fraction, "split-cache": False})
        task, spec = RegularizationTask(), prepare(dict(cfg))[2]
        for pid in range(3):
            o = task.client_oracles(cfg, spec, pid)
            assert o.n_upper > 0 and o.n_lower > 0 and (o.n_upper > o.n_lower) == (fraction > 0.5)
            assert o.num_examples == o.n_lower + o.n_upper == len(SplitTask().client_data(spec, pid))
    x = np.array([0.0, -1.0, -2.0] + [-1.0] * (task.dims(cfg, spec)[0] - 3))
    got = task.evaluate(cfg, spec, x, task.init_y(cfg, spec))
    assert set(got) == {"test_loss", "test_acc", "mean_log_coef", "spread_log_coef"}
    assert got["mean_log_coef"] == pytest.approx(np.mean(x)) and got["spread_log_coef"] == pytest.approx(np.std(x))


def test_hyper_cleaning_counts_a_clients_examples_and_reports_each_weight_kind_alone(monkeypatch):
    """HyperCleaningTask: a client's num_examples is its training plus its held-out examples; evaluate's mean weight
    of a kind no training example has (all corrupted, or none) is NaN, the other kind's a number."""
    from zofl.config import parse_config
    from zofl.setup import prepare
    from zofl.tasks.base import SplitTask
    from zofl.tasks.hypergrad import HyperCleaningTask

    cfg = parse_config({"strategy": "fednest", "task": "hyper-cleaning", "num-clients": 3, "server-fraction": 0.0,
                        "split-cache": False})
    task, spec = HyperCleaningTask(), prepare(dict(cfg))[2]
    for pid in range(3):
        o = task.client_oracles(cfg, spec, pid)
        assert o.num_examples == o.n_lower + o.n_upper == len(SplitTask().client_data(spec, pid))
    x, y, n = task.init_x(cfg, spec), task.init_y(cfg, spec), len(task.corrupted(cfg, spec))
    for every in (True, False):
        monkeypatch.setattr(task, "corrupted", lambda settings, spec: np.full(n, every))
        got = task.evaluate(cfg, spec, x, y)
        assert np.isnan(got["weight_clean"]) == every and np.isnan(got["weight_corrupted"]) == (not every), got


def test_the_quadratic_task_s_lipschitz_is_the_largest_eigenvalue_of_its_lower_hessian():
    """QuadraticHypergrad.lipschitz (l_{g,1}, the Neumann series' scale): the largest eigenvalue of grad^2_yy g,
    read here from the clients' own Hessian-vector products."""
    from zofl.setup import prepare
    from zofl.tasks.hypergrad import HeterogeneousQuadratic

    cfg, _, spec = prepare({"task": "zofl.tasks.hypergrad:HeterogeneousQuadratic", "strategy": "fednest",
                            "num-clients": 3})
    task = HeterogeneousQuadratic()
    x, y = task.init_x(cfg, spec), task.init_y(cfg, spec)
    for pid in range(3):
        o = task.client_oracles(cfg, spec, pid)
        H = np.column_stack([o.hvp_yy_g(x, y, e, np.arange(o.n_lower)) for e in np.eye(len(y))])
        assert task.lipschitz(spec) == pytest.approx(np.linalg.eigvalsh((H + H.T) / 2).max(), rel=1e-12)


def test_a_server_without_data_has_empty_data_of_the_declared_shape_and_no_examples():
    """ServerWithoutData (server-data = none): server and test data empty, of the declared features and classes and
    of ArrayData's dtypes (float32 features, int64 labels); no examples of its own; no fingerprint; every model
    method is the task's."""
    from zofl.tasks import SoftmaxTask
    from zofl.tasks.local import ServerWithoutData

    inner = SoftmaxTask()
    task = ServerWithoutData(inner, 7, 3)
    for data in (task.server_data(None), task.test_data(None)):
        assert data.x.shape == (0, 7) and data.y.shape == (0,) and data.num_classes == 3
        assert (data.x.dtype, data.y.dtype) == (np.float32, np.int64)
    assert task.num_train(None) == 0 and task.fingerprint is None and task.check(None) is None
    assert task.init_params(7, 3).shape == (21,) and task.loss == inner.loss


def _mlp_with_batchnorm(num_features, num_classes):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(num_features, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                               torch.nn.Linear(4, num_classes))


def test_a_torch_task_built_by_init_params_computes_the_modules_numbers_in_its_dtype():
    """A TorchTask never configured: init_params(num_features, num_classes) builds the module of that size; with
    dtype float64 the whole module (buffers too: BatchNorm's running statistics) computes in float64, and the flat
    vector maps onto its six parameters in order: the loss, gradient and predictions are the module's own."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from zofl.tasks.torch_task import TorchTask

    task = TorchTask(_mlp_with_batchnorm, dtype="float64")
    params = task.init_params(3, 2)
    torch.manual_seed(0)
    ref = _mlp_with_batchnorm(3, 2).double().eval()
    assert params.dtype == np.float64 and params.size == 3 * 4 + 4 + 4 + 4 + 4 * 2 + 2
    np.testing.assert_array_equal(params, torch.nn.utils.parameters_to_vector(ref.parameters()).detach().numpy())
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)).astype(np.float32), np.array([0, 1, 1, 0, 1, 0])
    xt, yt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y)
    loss = F.cross_entropy(ref(xt), yt)
    loss.backward()
    assert task.loss(params, x, y) == pytest.approx(float(loss.detach()), rel=1e-12)
    np.testing.assert_allclose(task.grad(params, x, y), np.concatenate([p.grad.reshape(-1) for p in ref.parameters()]),
                               rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(task.predict(params, x), ref(xt).argmax(dim=1).numpy())


def test_the_torch_softmax_takes_float32_parameters_as_the_numpy_softmax_does():
    """torch-softmax computes in float64 whatever the parameters' dtype: float32 parameters (a checkpoint kept in
    float32) give the numpy softmax's loss and predictions."""
    pytest.importorskip("torch")
    from zofl.tasks import SoftmaxTask
    from zofl.tasks.torch_task import TorchSoftmaxTask

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8, 5)).astype(np.float32), rng.integers(0, 3, 8)
    params = rng.normal(size=15).astype(np.float32)
    task, numpy_task = TorchSoftmaxTask(), SoftmaxTask()
    np.testing.assert_array_equal(task.init_params(5, 3), np.zeros(15))
    assert task.loss(params, x, y) == pytest.approx(numpy_task.loss(params.astype(np.float64), x, y), rel=1e-12)
    np.testing.assert_array_equal(task.predict(params, x), numpy_task.predict(params.astype(np.float64), x))


def test_a_holdout_split_keeps_at_least_one_example_on_each_side():
    """holdout_split: round(fraction * n) held out, but at least one and never all n (each side's oracle needs an
    example), a seeded permutation of the client's rows."""
    from types import SimpleNamespace

    from zofl.tasks.bilevel import holdout_split

    spec = SimpleNamespace(seed=3)
    for n, fraction, held in ((10, 0.3, 3), (5, 0.01, 1), (4, 1.0, 3), (2, 0.9, 1), (7, 0.5, 4)):
        lower, upper = holdout_split(spec, 1, n, fraction)
        assert len(upper) == held and len(lower) == n - held, (n, fraction)
        assert np.array_equal(np.sort(np.concatenate([lower, upper])), np.arange(n))


def test_the_toy_problems_have_no_data_of_their_own_in_arraydata_s_form_and_start_at_two():
    """QuadraticBilevel and SaddlePoint: server and test data empty (0 rows of DIM float32 features, int64 labels,
    2 classes: what evaluation code may still read), x_0 = (2, 2) as the module's examples start."""
    from types import SimpleNamespace

    from zofl.tasks.toy import DIM, QuadraticBilevel, SaddlePoint

    spec = SimpleNamespace(num_clients=3, seed=0)
    for task in (QuadraticBilevel(), SaddlePoint()):
        for data in (task.server_data(spec), task.test_data(spec)):
            assert data.x.shape == (0, DIM) and data.x.dtype == np.float32
            assert data.y.shape == (0,) and data.y.dtype == np.int64 and data.num_classes == 2
        assert np.array_equal(task.init_x(None, spec), np.full(DIM, 2.0))
