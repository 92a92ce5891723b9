"""FedRZO_bl (paper 001, Algorithms 2 and 3): pure functions, tasks, and the strategy on problems
with closed-form solutions (in-process: the real strategy and client code, without Ray)."""
import json

import numpy as np
import pytest

from zofl.algorithms.fedrzo_bl import (
    LOWER_BASE,
    LOWER_PLUS,
    UPPER,
    communication_rounds,
    lower_local_sgd,
    lower_rounds,
    phase_of,
    upper_local_steps,
)
from zofl.config import ConfigError
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.setup import data_spec, prepare
from zofl.tasks import ReluNetTask
from zofl.tasks.bilevel import HyperLogisticTask, _hyper_arrays, logistic_loss
from zofl.tasks.toy import QuadraticBilevel, SaddlePoint


def test_schedule_walks_lower_plus_lower_base_upper_with_growing_oracle():
    base, growth, R = 2, 0.5, 5
    assert [lower_rounds(r, base, growth) for r in range(R)] == [2, 2, 3, 3, 4]
    K = communication_rounds(R, base, growth)
    assert K == sum(2 * lower_rounds(r, base, growth) + 1 for r in range(R)) == 33
    phases = [phase_of(k, base, growth) for k in range(K)]
    assert [p.phase for p in phases[:5]] == [LOWER_PLUS, LOWER_PLUS, LOWER_BASE, LOWER_BASE, UPPER]
    assert [p.j for p in phases[:5]] == [0, 1, 0, 1, 0]
    assert [p.r for p in phases if p.phase == UPPER] == list(range(R))
    assert all(p.lower_rounds == lower_rounds(p.r, base, growth) for p in phases)  # R~_r, upper phases too
    assert phases[-1] == phase_of(K - 1, base, growth) and phases[-1].phase == UPPER
    assert phase_of(K, base, growth).r == R  # the next round starts upper round R
    with pytest.raises(ValueError):
        phase_of(-1, base, growth)


def test_upper_local_step_is_the_algorithm_box():
    # one step by hand: g = (n/eta^2)(f(x+v, y+) - f(x, y0)) v; x <- x - gamma (g + (x - P(x))/eta)
    f = lambda x, y, idx: float(x @ x) + float(y @ y)  # noqa: E731
    x, v, eta, gamma = np.array([2.0, -1.0]), np.array([0.0, 0.1]), 0.1, 0.01
    yp, y0 = np.array([1.0]), np.array([0.5])
    proj = lambda z: np.clip(z, -1, 1)  # noqa: E731
    g = (2 / eta**2) * (f(x + v, yp, None) - f(x, y0, None)) * v
    expected = x - gamma * (g + (x - proj(x)) / eta)
    got = upper_local_steps(f, x, v, yp, y0, np.zeros((1, 1), dtype=np.int64), gamma, eta, proj)
    np.testing.assert_allclose(got, expected)
    assert np.array_equal(x, [2.0, -1.0])  # the input is not modified
    # H steps use the same v and the delayed y's throughout (Remark 3)
    two = upper_local_steps(f, x, v, yp, y0, np.zeros((2, 1), dtype=np.int64), gamma, eta, proj)
    again = upper_local_steps(f, got, v, yp, y0, np.zeros((1, 1), dtype=np.int64), gamma, eta, proj)
    np.testing.assert_allclose(two, again)


def test_lower_local_sgd_reaches_the_minimiser():
    target = np.array([1.0, -2.0, 0.5])
    grad = lambda x, y, idx: y - x * target  # noqa: E731  h = 1/2||y - x target||^2
    y = lower_local_sgd(grad, 2.0, np.zeros(3), np.zeros((60, 1), dtype=np.int64), 0.3)
    np.testing.assert_allclose(y, 2.0 * target, atol=1e-6)


def _spec(run_config):
    cfg, task, spec = prepare(run_config)
    return cfg, task, spec


def test_hyper_logistic_lower_gradient_matches_finite_differences():
    cfg, task, spec = _spec({"strategy": "fedrzo-bl", "task": "hyper-logistic", "num-clients": 3})
    n, n_y = task.dims(spec)
    assert n == 3 and n_y == 64
    prob = task.client_problem(cfg, spec, 1)
    assert prob.n_upper + prob.n_lower == prob.num_examples
    rng = np.random.default_rng(0)
    x, y, idx = np.array([0.1, 0.3, 0.2]), 0.1 * rng.standard_normal(n_y), np.arange(8)
    u_lo, v_lo, *_ = _hyper_arrays(HyperLogisticTask, spec, 1, cfg.holdout_fraction)

    def h(y):
        return logistic_loss(y, u_lo[idx], v_lo[idx]) + 0.5 * x[1] * y @ y

    num = np.array([(h(y + 1e-6 * e) - h(y - 1e-6 * e)) / 2e-6 for e in np.eye(n_y)])
    np.testing.assert_allclose(prob.lower_grad(x, y, idx), num, atol=1e-6)
    np.testing.assert_array_equal(task.project_x(np.array([-1.0, 0.5, 0.0]), cfg), [cfg.x_min, 0.5, cfg.x_min])


def test_hyper_logistic_starts_at_hyper_x0_projected_onto_x():
    cfg, task, spec = _spec({"strategy": "fedrzo-bl", "task": "hyper-logistic", "num-clients": 3})
    np.testing.assert_array_equal(task.init_x(cfg, spec), [0.1, 0.1, 0.1])  # the default x_0
    cfg, task, spec = _spec({"strategy": "fedrzo-bl", "task": "hyper-logistic", "num-clients": 3,
                             "hyper-x0": 0.02, "x-min": 0.05})
    np.testing.assert_array_equal(task.init_x(cfg, spec), [0.05, 0.05, 0.05])  # below X: its floor


def test_fair_relu_is_minimax_with_group_weights():
    cfg, task, spec = _spec({"strategy": "fedrzo-bl", "task": "fair-relu", "num-clients": 3, "y-l2": 0.5})
    n, C = task.dims(spec)
    assert C == 10
    prob = task.client_problem(cfg, spec, 0)
    x, idx = task.init_x(cfg, spec), np.arange(prob.n_lower)
    y = np.linspace(0.5, 1.5, C)
    # the lower level is h_i = -f_i: its y-gradient is minus that of f_i
    num = np.array([(prob.f(x, y + 1e-6 * e, idx) - prob.f(x, y - 1e-6 * e, idx)) / 2e-6 for e in np.eye(C)])
    np.testing.assert_allclose(prob.lower_grad(x, y, idx), -num, atol=1e-6)
    # with y = 1 and no L2 on x, f_i + (lambda_y / 2) C is the plain mean squared loss of the ReLU task
    f1 = task.client_problem(cfg.with_values({"l2": 0.0}), spec, 0).f(x, np.ones(C), idx) + 0.5 * 0.5 * C
    data = ReluNetTask().client_data(spec, 0)
    assert f1 == pytest.approx(ReluNetTask().loss(x, data.x, data.y))


@pytest.mark.parametrize("task_cls", [QuadraticBilevel, SaddlePoint])
def test_fedrzo_bl_approaches_the_closed_form_solution(tmp_path, task_cls):
    cfg = {"strategy": "fedrzo-bl", "task": f"zofl.tasks.toy:{task_cls.__name__}", "num-clients": 4, "beta": 1.0,
           "num-rounds": 40, "local-steps": 5, "zo-lr": 0.01, "eta": 0.1, "lower-lr": 0.5,
           "output-dir": str(tmp_path), "run-name": "toy"}
    d, x = run_inprocess(cfg, workers=0)
    rec = [r for r in read_rounds(d) if r.get("level") == "upper"]
    spec = data_spec(prepare(cfg)[0])
    x_star = task_cls().solution(spec)
    start = np.linalg.norm(task_cls().init_x(None, spec) - x_star)  # the toy's x_0 needs no settings
    assert np.linalg.norm(x - x_star) < 0.1 * start, (x, x_star)
    assert rec[-1]["dist_to_solution"] < 0.1 * start
    assert rec[-1]["y_error"] < 0.1  # the oracle's y tracks y(x) (for the saddle point: y* = B x* / lam)
    summary = json.loads((d / "summary.json").read_text())  # with the method's own counts (summary_extra)
    assert (summary["upper_rounds"], summary["communication_rounds"]) == (40, len(read_rounds(d)) - 1) == \
        (len(rec), summary["upper_rounds"] + summary["lower_rounds"])


def test_bilevel_strategy_and_task_must_match():
    with pytest.raises(ConfigError, match="'task'.*bilevel"):
        prepare({"strategy": "fedrzo-bl", "task": "softmax"})
    with pytest.raises(ConfigError, match="'task'.*single-level"):
        prepare({"strategy": "fedavg", "task": "hyper-logistic"})
    with pytest.raises(ConfigError, match="lower-rounds"):
        prepare({"strategy": "fedrzo-bl", "task": "hyper-logistic", "lower-rounds": 0})


def test_fair_relu_s_worst_group_is_the_lowest_class_accuracy_and_an_unseen_class_counts_as_zero(monkeypatch):
    """FairReluTask.evaluate on a test set it is handed (classes 0, 1, 2 of 1, 2 and 3 rows; binary targets v; the
    network's outputs given, wrong on one row of class 1 and one of class 2): each class's accuracy is its correct
    rows over its rows (1/1, 1/2, 2/3), the worst 0.5; the loss is the mean of (v - out)^2 / 2; y's extremes are
    reported; a class absent from the test set makes the worst 0."""
    from zofl.tasks import bilevel

    task = bilevel.FairReluTask()
    labels = np.array([0, 1, 1, 2, 2, 2])
    v = np.array([1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    out = np.array([0.5, -0.25, -0.5, -2.0, 0.75, 0.5])  # rows 1 and 4 on the wrong side of 0
    monkeypatch.setattr(bilevel, "_test_arrays", lambda cls, spec: (np.zeros((6, 2)), v, labels, 3))
    monkeypatch.setattr(bilevel.FairReluTask, "_output", lambda self, x, u: out)
    got = task.evaluate(None, None, np.zeros(3), np.array([0.2, 0.5, 0.3]))
    assert got == pytest.approx({"test_loss": np.mean(0.5 * (v - out) ** 2), "test_acc": 4 / 6, "worst_group_acc": 0.5,
                                 "y_max": 0.5, "y_min": 0.2})
    monkeypatch.setattr(bilevel, "_test_arrays", lambda cls, spec: (np.zeros((6, 2)), v, labels, 4))
    assert task.evaluate(None, None, np.zeros(3), np.array([0.2, 0.5, 0.3]))["worst_group_acc"] == 0.0


def _num_grad(fn, x, eps=1e-6):
    return np.array([(fn(x + eps * e) - fn(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


@pytest.mark.parametrize("task_cls", [QuadraticBilevel, SaddlePoint])
def test_the_toy_tasks_closed_forms_are_those_of_their_clients_objectives(task_cls):
    """What the toy tasks state in closed form (y(x), F(x) = f(x, y(x)), x*) is read off the clients' own f_i and
    grad_y h_i, not merely self-consistent: y(x) zeroes the mean lower gradient, F is the mean f_i at (x, y(x)),
    x* zeroes grad F and is its minimum, and each f_i is the module docstring's formula."""
    from zofl.tasks.base import DataSpec

    task, spec = task_cls(), DataSpec(num_clients=4, seed=3)
    probs = [task.client_problem(None, spec, i) for i in range(4)]  # the toy's problems need no settings
    x = np.array([0.7, -1.3])
    y = task.y_of(spec, x)
    np.testing.assert_allclose(np.mean([p.lower_grad(x, y, None) for p in probs], axis=0), 0.0, atol=1e-12)
    mean_f = float(np.mean([p.f(x, y, None) for p in probs]))
    assert task.implicit_objective(spec, x) == pytest.approx(mean_f, rel=1e-12)
    x_star = task.solution(spec)
    assert np.abs(_num_grad(lambda z: task.implicit_objective(spec, z), x_star)).max() < 1e-6
    for d in np.eye(2):  # a minimum over x, not a saddle of F
        assert task.implicit_objective(spec, x_star + 0.1 * d) > task.implicit_objective(spec, x_star)
    y1 = np.array([0.4, 2.0])
    if task_cls is QuadraticBilevel:
        A, b, c = task._draw(spec)
        want = 0.5 * (y1 - c[1]) @ (y1 - c[1]) + 0.5 * task.rho * x @ x
        np.testing.assert_allclose(probs[1].lower_grad(x, y1, None), y1 - A[1] @ x - b[1])
    else:
        a, B, c = task._abc(spec)
        want = 0.5 * a[1] * (x - c[1]) @ (x - c[1]) + y1 @ B[1] @ x - 0.5 * task.lam * y1 @ y1
        # the lower level is h_i = -f_i: grad_y h_i = -(B_i x - lam y)
        np.testing.assert_allclose(probs[1].lower_grad(x, y1, None), -(B[1] @ x - task.lam * y1))
        task.lam = 2.0  # the closed forms divide by lam where they should: with lam != 1 they still agree
        assert task.implicit_objective(spec, x) == pytest.approx(
            np.mean([p.f(x, task.y_of(spec, x), None) for p in [task.client_problem(None, spec, i)
                                                               for i in range(4)]]), rel=1e-12)
        assert np.abs(_num_grad(lambda z: task.implicit_objective(spec, z), task.solution(spec))).max() < 1e-6
    assert probs[1].f(x, y1, None) == pytest.approx(want, rel=1e-12)

