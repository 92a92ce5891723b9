"""The controls (zofl.methods.controls): server-only runs on the same splits and records."""
import numpy as np
import pytest

from zofl.config import ConfigError
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

SMALL = {"num-rounds": 4, "num-clients": 5, "tau": 3.0, "beta": 0.6, "seed": 3}


def _run(tmp_path, name, **cfg):
    return run_inprocess({**SMALL, **cfg, "output-dir": str(tmp_path), "run-name": name}, workers=0)


def test_f1_only_is_zohfl_without_the_clients_term(tmp_path):
    """Every client a straggler (H = 0: both solves return the query point, f2 = 0) leaves ZO-HFL
    exactly its server steps on f1: bit for bit what f1-only computes without contacting anyone."""
    d_z, x_z = _run(tmp_path, "z", strategy="zohfl", **{"straggler-prob": 1.0})
    d, x_f = _run(tmp_path, "f", strategy="f1-only")
    np.testing.assert_array_equal(x_z, x_f)
    rec = read_rounds(d)
    assert all(r["participants"] == 0 and r["sampled"] == [] and r["local_steps"] == 0 for r in rec)
    # its records: no f2 estimate (null: no client), the step gamma_r = gamma / sqrt(r + 1) as ZO-HFL's
    assert [(r["f2_est"], r["gamma_r"]) for r in rec[1:]] == [(None, 0.01 / np.sqrt(k)) for k in range(1, len(rec))]
    assert [sorted(r) for r in rec] == [sorted(r) for r in read_rounds(d_z)]  # ZO-HFL's fields, no other
    _, x_c = _run(tmp_path, "c", strategy="zohfl")  # with the clients' term x differs
    assert not np.array_equal(x_c, x_f)


def test_x0_only_keeps_x0_and_sgd_controls_learn(tmp_path):
    d0, x0 = _run(tmp_path, "x0", strategy="x0-only")
    rec0 = read_rounds(d0)
    assert len({r["test_acc"] for r in rec0}) == 1 and len(rec0) == SMALL["num-rounds"] + 1
    for name in ("server-sgd", "centralised"):
        d, x = _run(tmp_path, name, strategy=name, **{"x0": "zeros", "local-lr": 0.3})
        rec = read_rounds(d)
        assert rec[-1]["test_acc"] > rec[0]["test_acc"] + 0.3, name
        assert rec[-1]["server_steps"] == 2 * int(np.ceil(SMALL["tau"] * np.sqrt(SMALL["num-rounds"])))


def test_centralised_pools_every_training_example_and_server_sgd_needs_server_data(tmp_path):
    from zofl.methods.controls import Centralised
    from zofl.setup import prepare

    cfg, task, spec = prepare({**SMALL, "strategy": "centralised"})
    assert len(Centralised(cfg, task, spec).data()) == task.num_train(spec)
    with pytest.raises(ConfigError, match="server-fraction"):
        _run(tmp_path, "none", strategy="server-sgd", **{"server-fraction": 0.0})


def test_a_control_gives_no_client_work():
    """A control contacts no client: its client half refuses work, naming the strategy."""
    from zofl.methods.controls import client_work

    class Cfg:
        strategy = "x0-only"

    with pytest.raises(RuntimeError, match="strategy 'x0-only' is a server-only control: no client has work"):
        client_work(Cfg(), None, None, None, None)


def test_server_sgd_draws_its_minibatches_from_its_own_stream_of_seed_and_round_and_x0_only_takes_no_step():
    """A server-only control's step r: K = 2 H_r SGD steps on minibatches from the stream (seed, r, control) (a
    different seed or round: other minibatches; the stream's own word keeps them apart from every other draw of
    (seed, r)); x0-only: x unchanged and 0 steps."""
    from zofl.algorithms.fedavg import local_lrs, local_sgd
    from zofl.algorithms.lower_level import minibatch_indices
    from zofl.algorithms.smoothing import seed_sequence
    from zofl.methods import METHODS
    from zofl.methods.controls import STREAM_CONTROL
    from zofl.setup import prepare

    def step(seed, r, words=None):
        cfg, task, spec = prepare({**SMALL, "strategy": "server-sgd", "seed": seed, "local-lr": 0.3})
        method = METHODS["server-sgd"].server(cfg, task, spec)
        x = method.init()["x"]
        data, K = method.data(), 2 * method.round_H({}, r)
        grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
        want = local_sgd(grad, x, minibatch_indices(seed_sequence(*(words or (seed, r, STREAM_CONTROL))), len(data),
                                                     K, cfg.batch_size),
                         local_lrs(method.hp.local_lr_schedule, method.hp.local_lr, r, K))
        got, k = method.step(x, r)
        return got, want, k, K

    got, want, k, K = step(3, 1)
    np.testing.assert_array_equal(got, want)
    assert k == K > 0
    assert not np.array_equal(got, step(4, 1)[0])
    assert not np.array_equal(got, step(3, 2)[0])
    assert not np.array_equal(got, step(3, 1, (3, 1))[1])
    cfg, task, spec = prepare({**SMALL, "strategy": "x0-only"})
    x0 = METHODS["x0-only"].server(cfg, task, spec)
    x = x0.init()["x"]
    assert x0.step(x, 2)[1] == 0 and x0.step(x, 2)[0] is x
