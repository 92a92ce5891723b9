"""FedRZO_nn (paper 001, Algorithm 1): pure functions, the ReLU task, the strategy in-process."""
import numpy as np
import pytest

from zofl.algorithms.fedrzo import local_zo_steps, moreau_gradient, project_ball0, project_box, zo_gradient
from zofl.algorithms.smoothing import sphere_directions
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.tasks import ReluNetTask


def test_projections_and_moreau_term():
    x = np.array([3.0, -0.5, -4.0])
    np.testing.assert_array_equal(project_box(x, 1.0), [1.0, -0.5, -1.0])
    p = project_ball0(x, 2.0)
    assert np.linalg.norm(p) == pytest.approx(2.0) and np.allclose(p / 2.0, x / np.linalg.norm(x))
    np.testing.assert_array_equal(project_ball0(x / 10, 2.0), x / 10)
    np.testing.assert_allclose(moreau_gradient(x, lambda z: project_box(z, 1.0), 0.5), [4.0, 0.0, -6.0])
    np.testing.assert_array_equal(moreau_gradient(x / 10, lambda z: project_box(z, 1.0), 0.5), 0.0)


def test_one_sided_estimator_is_unbiased_for_a_quadratic():
    # Lemma 1(i): E[(n / eta^2) f(x + v) v] = grad f^eta(x) = grad f(x) for a quadratic, v ~ unif(eta S)
    rng = np.random.default_rng(1)
    n, N, eta = 4, 100_000, 0.2
    M = rng.standard_normal((n, n))
    A, b, x = M @ M.T + np.eye(n), rng.standard_normal(n), rng.standard_normal(n)
    f = lambda z: 0.5 * z @ A @ z + b @ z  # noqa: E731
    V = eta * sphere_directions(2, N, n)
    samples = np.array([zo_gradient(f(x + v), f(x), v, eta) for v in V])
    mean, se = samples.mean(axis=0), samples.std(axis=0) / np.sqrt(N)
    assert np.all(np.abs(mean - (A @ x + b)) < 5 * se)


def test_local_steps_descend_and_respect_the_moreau_pull():
    c = np.array([2.0, -1.0, 0.5])
    loss = lambda p, idx: 0.5 * float((p - c) @ (p - c))  # noqa: E731
    dirs = sphere_directions(0, 3000, 3)
    batches = np.zeros((3000, 1), dtype=np.int64)
    free = local_zo_steps(loss, np.zeros(3), batches, dirs, 0.01, 0.01, lambda z: z)
    assert np.linalg.norm(free - c) < 0.2
    boxed = local_zo_steps(loss, np.zeros(3), batches, dirs, 0.001, 0.01, lambda z: project_box(z, 1.0))
    # the minimiser of 0.5||x - c||^2 + (1/(2 eta)) dist^2(x, box) is close to the box's projection of c
    assert np.abs(boxed).max() < 1.1 and np.linalg.norm(boxed - project_box(c, 1.0)) < 0.1


def test_relu_task_gradient_and_labels():
    rng = np.random.default_rng(0)
    task, x, y = ReluNetTask(), rng.random((30, 5)), rng.integers(0, 2, 30)
    w = task.init_params(5, 2)
    assert w.size == 4 * 5 + 4
    eps = 1e-6
    fd = np.array([(task.loss(w + eps * e, x, y) - task.loss(w - eps * e, x, y)) / (2 * eps) for e in np.eye(w.size)])
    np.testing.assert_allclose(task.grad(w, x, y), fd, rtol=1e-4, atol=1e-7)
    assert set(np.unique(task.predict(w, x))) <= {0, 1}


def test_softplus_net_is_the_relu_network_made_smooth():
    """softplus-net: the same parameters, x_0 and labels as relu-net, sigma = log(1 + e^z) (no overflow at
    large |z|), an exact gradient; ``hidden-units`` sets N1 for both through the run-config."""
    from zofl.setup import prepare
    from zofl.tasks import SoftplusNetTask

    rng = np.random.default_rng(1)
    task, x, y = SoftplusNetTask(), rng.standard_normal((30, 5)), rng.integers(0, 2, 30)
    w = task.init_params(5, 2)
    np.testing.assert_array_equal(w, ReluNetTask().init_params(5, 2))
    eps = 1e-6
    fd = np.array([(task.loss(w + eps * e, x, y) - task.loss(w - eps * e, x, y)) / (2 * eps) for e in np.eye(w.size)])
    np.testing.assert_allclose(task.grad(w, x, y), fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(task.activation(np.array([-800.0, 0.0, 800.0])), [0.0, np.log(2), 800.0])
    np.testing.assert_allclose(task.activation_grad(np.array([-800.0, 0.0, 800.0])), [0.0, 0.5, 1.0])
    for name in ("relu-net", "softplus-net"):
        _, t, spec = prepare({"task": name, "strategy": "fedavg", "hidden-units": 7})
        n0 = t.test_data(spec).x.shape[1]
        assert t.hidden == 7 and t.init_params(n0, 2).size == 7 * n0 + 7


def test_fedrzo_nn_learns_on_digits(tmp_path):
    d, x = run_inprocess({"strategy": "fedrzo-nn", "task": "relu-net", "num-clients": 5, "beta": 1.0,
                          "local-steps": 10, "num-rounds": 30, "zo-lr": 1e-4, "loss-scale": "sum", "x0": "zeros",
                          "output-dir": str(tmp_path), "run-name": "rzo"}, workers=0)
    rec = read_rounds(d)
    assert rec[-1]["test_loss"] < 0.95 * rec[0]["test_loss"] and rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.1
    assert all(r["local_steps"] == 5 * 10 for r in rec[1:]) and np.isfinite(x).all()


def test_each_client_takes_its_local_set_by_its_id_and_the_steps_keep_float64():
    """FedRZO_nn's X_i: client i takes entry i mod k of local-sets (box: clipped to [-b, b]; ball: scaled into the
    ball of radius set-radius; none: unchanged); the local zeroth-order steps compute in float64 whatever x's dtype."""
    from zofl.config import parse_config
    from zofl.methods.fedrzo_nn import local_set

    cfg = parse_config({"strategy": "fedrzo-nn", "local-sets": "box,ball,none", "box-bound": 0.5, "set-radius": 2.0})
    x = np.array([3.0, -4.0])
    want = {0: [0.5, -0.5], 1: [1.2, -1.6], 2: [3.0, -4.0], 3: [0.5, -0.5], 5: [3.0, -4.0]}
    for pid, w in want.items():
        np.testing.assert_allclose(local_set(cfg, pid)(x), w, rtol=1e-15)
    inside = np.array([0.3, 0.1])  # inside every set: every projection keeps it
    assert all(np.array_equal(local_set(cfg, pid)(inside), inside) for pid in range(3))
    x32 = np.array([0.5, -0.5], dtype=np.float32)
    out = local_zo_steps(lambda z, idx: float(z @ z), x32, np.zeros((2, 1), int), np.eye(2), 0.1, 0.01, lambda z: z)
    assert out.dtype == np.float64


@pytest.mark.parametrize("scale", ["mean", "sum"])
def test_fedrzo_nn_client_steps_on_the_minibatch_mean_or_sum_as_loss_scale_says(scale):
    """FedRZO_nn's client: H zeroth-order steps (``local_zo_steps``) on loss-scale x the task's minibatch loss
    (mean: 1, sum: N_i) + (l2/2)||p||^2, its minibatches and directions from (seed, round, client)."""
    from zofl.algorithms.lower_level import minibatch_indices
    from zofl.algorithms.smoothing import seed_sequence
    from zofl.core.protocol import Work
    from zofl.methods.fedrzo_nn import STREAM_BATCHES, STREAM_DIRECTIONS, FedRZOnnParams, client_work, local_set
    from zofl.setup import prepare
    from zofl.tasks.base import data_shape

    cfg, task, spec = prepare({"strategy": "fedrzo-nn", "task": "relu-net", "num-clients": 3, "seed": 4,
                               "loss-scale": scale, "l2": 0.01})
    hp, pid, r, H = FedRZOnnParams.of(cfg), 2, 1, 3
    x = np.asarray(task.init_params(*data_shape(task, spec)), dtype=np.float64)
    data = task.client_data(spec, pid)
    k = float(len(data)) if scale == "sum" else 1.0

    def loss(p, idx):
        return k * task.loss(p, data.x[idx], data.y[idx]) + 0.5 * cfg.l2 * float(p @ p)

    want = local_zo_steps(loss, x, minibatch_indices(seed_sequence(cfg.seed, r, pid, STREAM_BATCHES), len(data), H,
                                                     cfg.batch_size),
                          sphere_directions(seed_sequence(cfg.seed, r, pid, STREAM_DIRECTIONS), H, x.size),
                          hp.zo_lr, hp.eta, local_set(cfg, pid))
    got = client_work(cfg, task, spec, Work(pid, r, H, {"x": x}), {})
    np.testing.assert_array_equal(got.arrays["x"], want)
    assert got.num_examples == len(data) and got.metrics["steps"] == H
