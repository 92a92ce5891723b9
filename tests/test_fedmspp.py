"""FedMSPP (Yuan and Li 2022): the proximal solve against its closed form on a quadratic, exactly one minibatch
per client per round (a spy on the data the gradient reads, through the whole in-process engine), and the
server's uniform average."""
import numpy as np

from zofl.algorithms.fedmspp import prox_grad, prox_solve, server_average
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.tasks import SoftmaxTask

SEEN: list[np.ndarray] = []  # the feature rows of every gradient call of SpySoftmax


class SpySoftmax(SoftmaxTask):
    """The softmax task, recording the rows each gradient is computed on (the run's only grad calls with
    x0 = zeros: the server evaluates with loss and predict)."""

    def grad(self, params, x, y):
        SEEN.append(np.array(x, copy=True))
        return super().grad(params, x, y)


def test_the_proximal_solve_reaches_the_closed_form_on_a_quadratic():
    """f(y; B) = (1/2) y^T A y - b^T y: argmin f(y; B) + ||y - x||^2 / (2 eta) = (A + I/eta)^-1 (b + x/eta)."""
    rng = np.random.default_rng(0)
    M = rng.standard_normal((4, 4))
    A, b, x = M @ M.T + 0.1 * np.eye(4), rng.standard_normal(4), rng.standard_normal(4)
    for eta in (0.05, 1.0, 20.0):
        closed = np.linalg.solve(A + np.eye(4) / eta, b + x / eta)
        lr = 1.0 / (np.linalg.eigvalsh(A).max() + 1.0 / eta)
        y = prox_solve(lambda p: A @ p - b, x, eta, np.full(3000, lr))
        np.testing.assert_allclose(y, closed, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(prox_grad(lambda p: A @ p - b, closed, x, eta), 0.0, atol=1e-12)
    closed = np.linalg.solve(A + np.eye(4), b + x)
    few = prox_solve(lambda p: A @ p - b, x, 1.0, np.full(3, 0.1))  # a few steps: an inexact solve, from x towards it
    assert np.linalg.norm(few - closed) < np.linalg.norm(x - closed)
    np.testing.assert_array_equal(prox_solve(lambda p: A @ p - b, x, 1.0, np.zeros(0)), x)  # K = 0: x
    np.testing.assert_allclose(server_average([np.ones(2), 3 * np.ones(2)]), [2.0, 2.0])  # uniform


def test_each_client_reads_exactly_one_minibatch_per_round(tmp_path):
    """Every sampled client's K = 2H gradient steps of a round read the same rows (one minibatch of
    batch-size), and a new minibatch is drawn per client and round."""
    SEEN.clear()
    d, _ = run_inprocess({"strategy": "fedmspp", "task": "tests.test_fedmspp:SpySoftmax", "num-clients": 4,
                          "beta": 0.5, "tau": 2.0, "num-rounds": 4, "x0": "zeros", "batch-size": 8,
                          "output-dir": str(tmp_path), "run-name": "spy"}, workers=0)
    rec = read_rounds(d)[1:]
    assert SEEN, "the spy was never called"
    chunks = [2 * r["H"] for r in rec for _ in r["sampled"]]  # each client's calls, in order
    assert len(SEEN) == sum(chunks) == sum(r["local_steps"] for r in rec)
    batches, i = [], 0
    for k in chunks:
        calls = SEEN[i:i + k]
        i += k
        assert calls[0].shape[0] == 8 and all(np.array_equal(c, calls[0]) for c in calls)  # one minibatch
        batches.append(calls[0])
    assert len(batches) == sum(len(r["sampled"]) for r in rec) == 8  # one per client per round
    assert not any(np.array_equal(a, b) for j, a in enumerate(batches) for b in batches[j + 1:])  # new ones


def test_fedmspp_learns(tmp_path):
    d, x = run_inprocess({"strategy": "fedmspp", "num-clients": 5, "beta": 0.6, "tau": 3.0, "num-rounds": 8,
                          "x0": "zeros", "output-dir": str(tmp_path), "run-name": "learns"}, workers=0)
    rec = read_rounds(d)
    assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3 and np.isfinite(x).all()


def test_the_server_averages_the_clients_models_or_takes_a_robust_rule_s():
    """FedMSPP's server step: the plain mean of the returned models (server_average), or with aggregation =
    median their coordinate-wise median; no reply leaves x as it was."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Reply
    from zofl.methods.fedmspp import FedMSPP
    from zofl.setup import prepare

    ys = [np.array([1.0, 0.0]), np.array([5.0, 2.0]), np.array([2.0, 9.0])]
    replies = [Reply(pid, {"x": y}, 10) for pid, y in enumerate(ys)]
    for extra, want in (({}, server_average(ys)), ({"aggregation": "median"}, np.array([2.0, 2.0]))):
        cfg, task, spec = prepare({"strategy": "fedmspp", "num-clients": 3, **extra})
        method = FedMSPP(cfg, task, spec)
        state = {**method.init(), "x": np.zeros(2)}
        new, _ = method.update(state, RoundPlan(0, [0, 1, 2], [], []), replies)
        np.testing.assert_allclose(new["x"], want)
        assert method.update(state, RoundPlan(0, [0, 1, 2], [], []), [])[0] is state
