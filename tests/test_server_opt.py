"""Server optimizers (run-config server-optimizer; zofl.algorithms.server_opt): Flower's own FedAvgM, FedAdagrad,
FedAdam and FedYogi give the same steps on the same aggregates, and the hook changes a method's server step only
when asked (sgd: the method's own numbers; a resume continues the moments)."""
import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvgM, FedYogi

from zofl.algorithms.server_opt import init_state, server_step
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds


def flower_steps(strategy, x0: np.ndarray, aggregates: list[np.ndarray]) -> list[np.ndarray]:
    """Flower's strategy fed one reply per round (the aggregate itself, so its FedAvg is that array)."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    # messages are made as a ServerApp makes them (Flower's runtime, and zofl.inprocess.InProcessGrid, set this)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    out, x = [], x0
    for t, y in enumerate(aggregates, start=1):
        if isinstance(strategy, FedAvgM):
            strategy.current_arrays = ArrayRecord({"x": Array(x)})
        else:
            strategy.current_arrays = {"x": x}
        sent = Message(RecordDict(), dst_node_id=1, message_type="train")
        reply = Message(RecordDict({"arrays": ArrayRecord({"x": Array(y)}),
                                    "metrics": MetricRecord({"num-examples": 1})}), reply_to=sent)
        arrays, _ = strategy.aggregate_train(t, [reply])
        x = arrays["x"].numpy()
        out.append(x)
    return out


def ours(kind: str, x0: np.ndarray, aggregates: list[np.ndarray], lr: float, **hp) -> list[np.ndarray]:
    out, x, state = [], x0, init_state(kind, x0.size)
    for t, y in enumerate(aggregates, start=1):
        x, state = server_step(kind, x, y - x, lr, t, state, **hp)
        out.append(x)
    return out


@pytest.mark.parametrize("kind,flower", [
    ("momentum", lambda: FedAvgM(server_learning_rate=0.7, server_momentum=0.8)),
    ("adagrad", lambda: FedAdagrad(eta=0.1, tau=1e-3)),
    ("adam", lambda: FedAdam(eta=0.1, beta_1=0.85, beta_2=0.95, tau=1e-3)),
    ("yogi", lambda: FedYogi(eta=0.05, beta_1=0.9, beta_2=0.99, tau=1e-2)),
])
def test_the_steps_are_flowers_own(kind, flower):
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=5)
    aggregates = [x0 + rng.normal(size=5) for _ in range(4)]
    strategy = flower()
    hp = {"momentum": 0.8} if kind == "momentum" else \
        {"beta_1": strategy.beta_1, "beta_2": strategy.beta_2, "tau": strategy.tau} if kind != "adagrad" \
        else {"tau": strategy.tau}
    lr = 0.7 if kind == "momentum" else strategy.eta
    got = ours(kind, x0, aggregates, lr, **hp)
    want = flower_steps(strategy, x0, aggregates)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_sgd_is_the_methods_own_step_and_a_count_divides_as_the_method_does():
    x, d = np.array([1.0, 2.0]), np.array([0.3, -0.7])
    assert np.array_equal(server_step("sgd", x, d, 0.5, 1, {})[0], x + 0.5 * d)
    assert np.array_equal(server_step("sgd", x, d, 0.5, 1, {}, count=3)[0], x + 0.5 * d / 3)
    x1, state = server_step("adam", x, d, 0.5, 1, init_state("adam", 2), count=3)
    x2, _ = server_step("adam", x, d / 3, 0.5, 1, init_state("adam", 2))
    assert np.array_equal(x1, x2) and set(state) == {"opt_m", "opt_v"}
    with pytest.raises(ValueError, match="not one of"):
        server_step("nadam", x, d, 0.5, 1, init_state("adam", 2))


BASE = {"num-rounds": 4, "num-clients": 5, "beta": 0.6, "tau": 2.0, "checkpoint-every": 1}


def final(tmp_path, name, **cfg):
    d, x = run_inprocess({**BASE, **cfg, "output-dir": str(tmp_path), "run-name": name}, workers=0)
    return x, read_rounds(d)


@pytest.mark.parametrize("strategy,extra", [("fedavg", {}), ("zohfl", {}), ("scaffold", {}),
                                            ("fedbuff", {"engine": "async"})])
def test_each_method_with_a_server_step_applies_the_optimizer_only_when_asked(tmp_path, strategy, extra):
    cfg = {"strategy": strategy, **extra}
    x_sgd, _ = final(tmp_path, "sgd", **cfg)
    x_m0, _ = final(tmp_path, "m0", **cfg, **{"server-optimizer": "momentum", "server-momentum": 0.0})
    np.testing.assert_allclose(x_m0, x_sgd, rtol=1e-12, atol=1e-14)  # FedAvgM with beta 0 is the plain step
    x_adam, recs = final(tmp_path, "adam", **cfg, **{"server-optimizer": "adam"})
    assert np.all(np.isfinite(x_adam)) and not np.allclose(x_adam, x_sgd)


def test_a_resumed_run_continues_the_optimizers_moments(tmp_path):
    cfg = {"strategy": "fedavg", "server-optimizer": "yogi", "server-lr": 0.05}
    x_straight, _ = final(tmp_path, "straight", **cfg)
    final(tmp_path, "resumed", **{**cfg, "num-rounds": 2})
    x_resumed, recs = final(tmp_path, "resumed", **cfg, resume=True)
    assert np.array_equal(x_resumed, x_straight) and [r["round"] for r in recs] == [0, 1, 2, 3, 4]


def test_fedavgm_is_fedavg_with_server_momentum(tmp_path):
    """The worked example of docs/architecture.md: fedavgm's module is its Params and one attribute."""
    x_m, _ = final(tmp_path, "fedavgm", strategy="fedavgm", **{"server-momentum": 0.5})
    x_f, _ = final(tmp_path, "fedavg-m", strategy="fedavg", **{"server-optimizer": "momentum", "server-momentum": 0.5})
    x_plain, _ = final(tmp_path, "fedavg", strategy="fedavg")
    assert np.array_equal(x_m, x_f) and not np.allclose(x_m, x_plain)
