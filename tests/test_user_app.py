"""A user's own Flower App (tests/user_app: laid out as Flower's PyTorch template, its own CNN and DataLoader, no
zofl harness) switched from Flower's FedAvg to zofl's ZO-HFL, SCAFFOLD and FedBuff by its strategy line and one call
in its train; its numbers equal the same method through zofl's harness on the same data."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402

from zofl.algorithms.scaffnew import control_update  # noqa: E402
from zofl.client_app import load_state  # noqa: E402
from zofl.config import ConfigError  # noqa: E402
from zofl.inprocess import InProcessGrid, run_inprocess  # noqa: E402
from zofl.strategies import (  # noqa: E402
    APP_STRATEGIES,
    TASK_STRATEGIES,
    FedBuffStrategy,
    FedNestStrategy,
    ScaffnewStrategy,
    ScaffoldStrategy,
    ZOHFLStrategy,
)
from zofl.strategies.wire import flat_model, model_record  # noqa: E402

APP = Path(__file__).parent / "user_app"
sys.path.insert(0, str(APP))

from userapp import server_app  # noqa: E402

ROUNDS = 3
USER = {"num-server-rounds": ROUNDS, "fraction-train": 1.0, "local-epochs": 1, "lr": 0.05}
# the same settings as userapp.server_app.make_strategy gives each strategy, as zofl run-config keys
HARNESS = {
    "zohfl": {"strategy": "zohfl", "eta": 0.05, "gamma": 0.05},
    "scaffold": {"strategy": "scaffold", "local-lr": 0.05},
    "scaffnew": {"strategy": "scaffnew", "local-lr": 0.05, "comm-prob": 0.5},
    "fedbuff": {"strategy": "fedbuff", "engine": "async", "buffer-size": 2, "clock": "simulated"},
}


def user_run(strategy: str, out: Path, node_config=None) -> dict[str, dict]:
    """The user's ServerApp on an in-process Grid whose nodes run the user's ClientApp; {strategy: its output}. The
    nodes run in a process of their own (workers = 1, forked: it has the user's App on its path), for the reason
    ``harness_x`` gives: with workers = 0 the server's torch evaluation and a client's torch steps run in two
    threads at once, and one FedBuff run under pytest-xdist at load ended on other numbers (seen once)."""
    rc = {**USER, "strategy": strategy, "out": str(out)}
    torch.set_num_threads(1)
    grid = InProcessGrid(rc, 3, workers=1, client_app="userapp.client_app:app", node_config=node_config)
    try:
        server_app.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    finally:
        grid.close()
    return {name: json.loads((out / f"{name}.json").read_text()) for name in strategy.split(",")}


def harness_x(name: str, tmp_path: Path) -> np.ndarray:
    """The final x of the same method through zofl's harness (``run_inprocess``: ``zofl run``'s numbers), its clients
    in a process of their own (workers = 1): with workers = 0 the asynchronous engine's server evaluates its torch
    model in one thread while a client steps its own in another, and one run in ~30 under pytest-xdist ended on
    other numbers (torch's function transforms in two threads at once; seen once, not reproduced alone)."""
    rc = {**HARNESS[name], "task": "harness_task:TASK", "num-clients": 3, "num-rounds": ROUNDS, "local-steps": 2,
          "beta": 1.0, "output-dir": str(tmp_path / "harness"), "run-name": name}
    return run_inprocess(rc, workers=1)[1]


def flat(out: dict) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64) for v in out["model"].values()])


def test_the_users_app_runs_flowers_fedavg_and_three_zofl_strategies(tmp_path):
    outs = {**user_run("flower-fedavg", tmp_path), **user_run("zohfl,scaffold,fedbuff", tmp_path)}
    assert set(outs) == {"flower-fedavg", "zohfl", "scaffold", "fedbuff"}
    for name, out in outs.items():
        assert np.all(np.isfinite(flat(out))), name
    for name in ("flower-fedavg", "zohfl", "scaffold"):  # Flower's evaluation of the user's own evaluate
        assert len(outs[name]["evaluate"]) == ROUNDS
    assert all(rec["participants"] == 3 for rec in outs["zohfl"]["train"].values())


@pytest.mark.parametrize("name", ["zohfl", "scaffold", "scaffnew", "fedbuff"])
def test_the_users_app_gives_the_harness_numbers_bit_for_bit(name, tmp_path):
    user = flat(user_run(name, tmp_path)[name])
    harness = harness_x(name, tmp_path)
    assert user.shape == harness.shape and np.array_equal(user, harness)


def test_scaffnew_keeps_each_h_i_in_its_nodes_context_and_the_server_sends_x_alone():
    """Every client in every round (beta = 1, no straggler): from round 1 on the downlink is x alone (the server's
    copy of h_i is not sent), each node's Context holds its h_i and x^_i, and settling that h_i by the final x gives
    the server's copy bit for bit."""
    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app")
    try:
        strategy = ScaffnewStrategy(comm_prob=0.5, local_lr=0.1)
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3)))}), num_rounds=3)
        states = {pid: load_state(grid.contexts[node]) for pid, node in strategy.fed.nodes.items()}
    finally:
        grid.close()
    x = flat_model(result.arrays)[0]
    assert [rec["downlink_bytes"] for rec in strategy.records[1:]] == [3 * x.nbytes] * 3
    server = strategy.run.state
    for pid, st in states.items():
        assert np.any(st["h_i"] != 0) and int(st["x_hat_round"][0]) == 2
        np.testing.assert_array_equal(control_update(st["h_i"], x, st["x_hat"], 0.5, 0.1), server["h"][pid])
    np.testing.assert_allclose(server["h"].sum(axis=0), 0.0, atol=1e-12)


def test_client_ids_follow_the_node_ids_when_no_node_names_a_partition(caplog):
    """Deployed SuperNodes without partition-id: the client ids are 0..m-1 in node-id order, m = the nodes."""
    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app", node_config={i: {} for i in range(3)})
    try:
        strategy = ZOHFLStrategy(run_config={"local-steps": 1})
        with caplog.at_level("INFO", logger="zofl"):
            result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3)))}),
                                    num_rounds=2)
    finally:
        grid.close()
    # Flower's Strategy.start logs the strategy's summary(): the class, the method and its parameters
    assert f"ZOHFLStrategy: ZO-HFL (zofl), {strategy.params}" in caplog.messages
    assert strategy.fed.nodes == dict(enumerate(sorted(grid.contexts)))
    assert strategy.run.cfg.num_clients == 3 and len(strategy.records) == 3  # round 0 and two rounds
    assert all(rec["participants"] == 3 for rec in strategy.records[1:])
    # no results_dir: the summary zofl run would write is kept with the records (results.MemoryWriter)
    summary, config = strategy.writer.summary, strategy.writer.config
    assert (summary["status"], summary["rounds"], summary["total_participants"]) == ("ok", 2, 6)
    assert summary["final_test_acc"] is None and summary["results_dir"] is None  # the server holds no data
    assert summary["dataset"] == "the clients' own data" and summary["n_train"] == sum(
        summary["reported_sizes"].values()) > 0  # N_train: the sizes the nodes reported (method.reported_sizes)
    assert (config["strategy"], config["local-steps"], config["num-clients"]) == ("zohfl", 1, 3)
    assert result.arrays["w"].numpy().shape == (2, 3) and np.any(result.arrays["w"].numpy() != 0)


@pytest.mark.parametrize("cls", APP_STRATEGIES, ids=lambda c: c.__name__)
def test_every_strategy_for_a_users_app_runs_on_a_users_clientapp(cls):
    """Each class of APP_STRATEGIES, with its defaults and one local step, two rounds (updates) on three nodes whose
    ClientApp is a user's (a torch Linear model on data of its own): a finite model that moved, a record per round,
    every client's reply used."""
    extra = {"buffer-size": 2} if cls is FedBuffStrategy else {}
    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app")
    try:
        strategy = cls(run_config={"local-steps": 1, **extra}, **({"clock": "simulated"} if cls is FedBuffStrategy
                                                                   else {}))
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3)))}), num_rounds=2)
    finally:
        grid.close()
    w = result.arrays["w"].numpy()
    assert w.shape == (2, 3) and np.all(np.isfinite(w)) and np.any(w != 0)
    assert len(strategy.records) == 3 and all(rec["participants"] >= 1 for rec in strategy.records[1:])
    assert all(rec["failures"] == 0 for rec in strategy.records[1:])


TASKS = {"toy": "zofl.tasks.hypergrad:QuadraticHypergrad", "hyper-logistic": "hyper-logistic"}
TASK_RUNS = {  # each bilevel method on its kind of task, as tests/test_config.py's small runs
    "afbo": ("toy", {"buffer-size": 3}), "afbo-global": ("toy", {"buffer-size": 3}),
    "adbo": ("toy", {"buffer-size": 3}), "fednest": ("toy", {}), "sdbo": ("toy", {}),
    "fedrzo-bl": ("hyper-logistic", {"local-steps": 2, "lower-rounds": 1, "zo-lr": 0.01, "eta": 0.01}),
}


@pytest.mark.parametrize("cls", TASK_STRATEGIES, ids=lambda c: c.__name__)
def test_a_bilevel_method_on_a_users_task_gives_the_harness_numbers_bit_for_bit(cls, tmp_path):
    """Each bilevel method's strategy, its problem a task of zofl's protocol on the server (``task=``) and in the
    ClientApps (``zofl.client.train_task``), Flower holding the upper variable x: its final x equals the same
    method's through zofl's harness on the same task bit for bit (the simulated clock for the asynchronous ones)."""
    from zofl.config import key_by_name, parse_config
    from zofl.settings import TaskSettings
    from zofl.setup import data_spec
    from zofl.tasks import load_task

    name = cls.method.name
    kind, keys = TASK_RUNS[name]
    task = load_task(TASKS[kind])
    base = {"local-steps": 1, **keys}
    params = {k: v for k, v in base.items() if k in cls.method.Params.names()}
    shared = {k: v for k, v in base.items() if k not in params}
    fields = {key_by_name()[k].field: v for k, v in params.items()}  # the Params' field names (zo-lr -> zo_lr)
    clock = {"clock": "simulated"} if cls.method.kind == "async" else {}
    rc = {"strategy": name, "task": TASKS[kind], "num-clients": 4, "beta": 1.0, **base,
          **({"engine": "async"} if clock else {})}
    x0 = np.asarray(task.init_x(TaskSettings.of(parse_config(rc)), data_spec(parse_config(rc))), dtype=np.float64)
    grid = InProcessGrid({"task": TASKS[kind]}, 4, workers=0, client_app="task_client:app")
    try:
        no_eval = {} if clock else {"fraction_evaluate": 0.0}  # this ClientApp has no @app.evaluate()
        strategy = cls(task=task, fraction_train=1.0, run_config=shared, **fields, **clock, **no_eval)
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"x": Array(x0)}), num_rounds=3)
    finally:
        grid.close()
    _, x = run_inprocess({**rc, "num-rounds": 3, "output-dir": str(tmp_path), "run-name": name}, workers=0)
    assert np.array_equal(result.arrays["x"].numpy().ravel(), x)
    if cls is TASK_STRATEGIES[0]:  # initial_arrays of another size than the task's x: refused before round 1
        grid = InProcessGrid({"task": TASKS[kind]}, 4, workers=0, client_app="task_client:app")
        try:
            with pytest.raises(ValueError, match=rf"^initial_arrays hold {x0.size + 1} numbers, the task's upper "
                                                 rf"variable x {x0.size}$"):
                cls(task=task, fraction_train=1.0, run_config=shared, **fields, **clock, **no_eval).start(
                    grid=grid, initial_arrays=ArrayRecord({"x": Array(np.zeros(x0.size + 1))}), num_rounds=1)
        finally:
            grid.close()


def test_the_flat_model_is_the_records_arrays_in_order_and_comes_back_in_their_names():
    rec = ArrayRecord({"a.weight": Array(np.arange(6, dtype=np.float32).reshape(2, 3)),
                       "a.bias": Array(np.array([7.0, 8.0]))})
    x, layout = flat_model(rec)
    assert x.dtype == np.float64 and x.tolist() == [0, 1, 2, 3, 4, 5, 7, 8]
    back = model_record(x, layout)
    assert list(back) == ["a.weight", "a.bias"] and back["a.weight"].numpy().shape == (2, 3)
    assert back["a.weight"].numpy().dtype == np.float64
    with pytest.raises(ValueError, match="'s' has dtype"):
        flat_model(ArrayRecord({"s": Array(np.array(["x"]))}))
    with pytest.raises(ValueError, match="x has 3 entries, the model 8"):
        model_record(np.zeros(3), layout)
    assert layout == (("a.weight", (2, 3), "float32"), ("a.bias", (2,), "float64"))  # each array's own dtype kept
    empty, none = flat_model(ArrayRecord())  # no arrays: an empty x (a model with no parameters is refused later)
    assert empty.dtype == np.float64 and empty.shape == (0,) and none == ()


def test_a_users_work_message_holds_the_model_in_its_names_and_the_methods_other_arrays_apart():
    """``wire.app_work_content``: "arrays" becomes the model (the user's names), the method's other arrays go to
    "zofl.arrays", x not among them (it is the model)."""
    from zofl.strategies.wire import APP_ARRAYS, app_work_content

    content = RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(8)), "c": Array(np.ones(8))}),
                          "config": ConfigRecord({"round": 0})})
    model = ArrayRecord({"w": Array(np.zeros(8))})
    app_work_content(content, model)
    assert list(content.array_records["arrays"]) == ["w"] and list(content.array_records[APP_ARRAYS]) == ["c"]


def test_a_strategy_is_made_with_its_methods_typed_params_checked_at_once():
    assert ZOHFLStrategy(mu=0.5).params.mu == 0.5
    assert ScaffoldStrategy(local_lr=0.2).params.local_lr == 0.2
    with pytest.raises(ConfigError, match="'mu' must be a number > 0, got -1.0"):
        ZOHFLStrategy(mu=-1)
    with pytest.raises(TypeError, match="ZO-HFL has no parameter.s. mux; its parameters are .*mu"):
        ZOHFLStrategy(mux=1)
    with pytest.raises(TypeError, match="params must be a ZOHFLParams"):
        ZOHFLStrategy(params=ScaffoldStrategy().params)
    with pytest.raises(ConfigError, match="'crash-prob' cannot be set for a user's App"):
        FedBuffStrategy(run_config={"crash-prob": 0.1})
    with pytest.raises(ConfigError, match="'buffer-size'"):
        FedBuffStrategy(run_config={"buffer-size": 0})
    twice = r"'server-optimizer' are FedBuff's parameters: .*\(server_optimizer=\.\.\.\)"
    with pytest.raises(ConfigError, match=twice):
        FedBuffStrategy(run_config={"server-optimizer": "adam"})  # a Params key in run_config would lose silently
    for cls in APP_STRATEGIES:  # every one is made with its defaults, and names its method's Params
        strategy = cls()
        assert isinstance(strategy.params, cls.method.Params)
    # several names in one line, each message whole
    with pytest.raises(TypeError, match=r"^ZO-HFL has no parameter\(s\) mux, nu; its parameters are [a-z0-9_]+(, "
                                        r"[a-z0-9_]+)+ \(ZOHFLParams\)$"):
        ZOHFLStrategy(mux=1, nu=2)
    with pytest.raises(TypeError, match=r"^params must be a ZOHFLParams \(ZO-HFL's parameters\), got FedAvgParams$"):
        ZOHFLStrategy(params=ScaffoldStrategy().params)
    with pytest.raises(ConfigError, match=r"^run_config key\(s\) 'crash-prob', 'hang-prob' cannot be set for a "
                                          r"user's App"):
        FedBuffStrategy(run_config={"hang-prob": 0.1, "crash-prob": 0.1})
    with pytest.raises(ConfigError, match=r"^run_config key\(s\) 'server-lr', 'server-optimizer' are FedBuff's "
                                          r"parameters: give them as keyword arguments \(server_lr=\.\.\., "
                                          r"server_optimizer=\.\.\.\)$"):
        FedBuffStrategy(run_config={"server-optimizer": "adam", "server-lr": 0.5})
    # a bilevel method needs a task of zofl's protocol, a model method takes none
    with pytest.raises(TypeError, match=r"^FedNest_SGD needs task=, .+; got NoneType$"):
        FedNestStrategy()
    with pytest.raises(TypeError, match=r"^FedNest_SGD needs task=, .+; got str$"):
        FedNestStrategy(task="not a task")
    with pytest.raises(TypeError, match=r"^ZO-HFL trains the model of the ClientApps: it takes no task$"):
        ZOHFLStrategy(task=object())


def test_every_registered_model_method_has_a_strategy_for_a_users_app():
    """From the registry: a method of a supervised model (not a control, not Flower's own FedAvg) has its class."""
    from zofl.core.method import CONTROL, MODEL
    from zofl.methods import METHODS

    model = {e.server for e in METHODS.values() if e.server.needs == MODEL and e.server.kind != CONTROL
             and not e.server.flower_fedavg}
    bilevel = {e.server for e in METHODS.values() if e.server.needs != MODEL}
    assert {cls.method for cls in APP_STRATEGIES} == model and {cls.method for cls in TASK_STRATEGIES} == bilevel
    for cls in APP_STRATEGIES + TASK_STRATEGIES:
        assert cls.__module__ == f"zofl.strategies.{cls.method.__module__.rsplit('.', 1)[1]}", cls


def _work(strategy_settings: str, x: np.ndarray) -> Message:
    rec = RecordDict({"arrays": ArrayRecord({"w": Array(x)}), "zofl.arrays": ArrayRecord(),
                      "config": ConfigRecord({"round": 0, "H": 1, "zofl.client-id": 0,
                                              "zofl.settings": strategy_settings})})
    return Message(rec, dst_node_id=1, message_type="train")


def test_the_client_half_refuses_what_it_cannot_use(as_the_serverapp):
    from zofl.client import train as zofl_train

    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    data = (np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1]))
    bn = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    settings = json.dumps({"strategy": "fedavg", "local-steps": 1})
    with pytest.raises(ValueError, match="holds buffers .*running_mean"):
        zofl_train(_work(settings, np.zeros(8)), ctx, bn, data)
    lin = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="the server's model has 5 parameters, this ClientApp's 8"):
        zofl_train(_work(settings, np.zeros(5)), ctx, lin, data)
    with pytest.raises(ValueError, match="is not the JSON of at most"):
        zofl_train(_work("x" * 70_000, np.zeros(8)), ctx, lin, data)
    with pytest.raises(ConfigError, match="'local-lr' must be a number > 0"):
        zofl_train(_work(json.dumps({"strategy": "fedavg", "local-lr": -1}), np.zeros(8)), ctx, lin, data)
    with pytest.raises(ValueError, match="one integer label per input"):
        zofl_train(_work(settings, np.zeros(8)), ctx, lin, (np.zeros((4, 3)), np.zeros(4)))
    plain = Message(RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(8))})}), dst_node_id=1, message_type="train")
    with pytest.raises(ValueError, match="the train message's .* is not the JSON"):  # Flower's FedAvg's, no config
        zofl_train(plain, ctx, lin, data)
    from zofl.client import APP_QUERY, identity
    from zofl.core.protocol import CONFIG

    query = Message(RecordDict({"config": ConfigRecord({APP_QUERY: "partition"})}), dst_node_id=1, message_type="train")
    assert dict(zofl_train(query, ctx, lin, data).content[CONFIG]) == dict(identity(ctx, *data)[CONFIG])
    reply = zofl_train(_work(settings, np.zeros(8)), ctx, lin, data)  # and what it can: FedAvg's y, N_i = 4
    assert reply.content["metrics"]["num-examples"] == 4 and reply.content["arrays"]["x"].numpy().shape == (8,)
    varied = (np.arange(12, dtype=np.float32).reshape(4, 3) / 10, data[1])

    def trained(loss_fn):
        reply = zofl_train(_work(settings, np.zeros(8)), ctx, lin, varied, loss_fn=loss_fn)
        return reply.content["arrays"]["x"].numpy()

    plain_loss = trained(None)
    doubled = trained(lambda out, t: 2.0 * torch.nn.functional.cross_entropy(out, t))
    assert np.any(plain_loss != 0) and not np.array_equal(doubled, plain_loss)  # the user's loss is the one trained


@pytest.mark.flower
def test_the_users_app_through_flwr_run_on_the_ray_simulation_gives_the_harness_numbers(tmp_path):
    """The real thing: ``flwr run`` of the user's App on a SuperLink with the Ray simulation (three SuperNodes, the
    ServerApp running ZO-HFL, SCAFFOLD and FedBuff in turn); each final model equals the harness's bit for bit."""
    from zofl.launch import local_superlink

    out = tmp_path / "out"
    out.mkdir()
    with local_superlink(tmp_path / "link") as link:
        res = link.run({**USER, "strategy": "zohfl,scaffold,fedbuff", "out": str(out)}, num_supernodes=3,
                       app_dir=APP, timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    for name in ("zohfl", "scaffold", "fedbuff"):
        user = flat(json.loads((out / f"{name}.json").read_text()))
        assert np.array_equal(user, harness_x(name, tmp_path)), name


@pytest.mark.parametrize("cls", APP_STRATEGIES + TASK_STRATEGIES, ids=lambda c: c.__name__)
def test_a_strategy_keeps_the_params_and_the_arguments_it_is_given(cls):
    """A Params instance given positionally or as ``params=`` is the strategy's (not its method's defaults), with
    the strategy's own keyword arguments beside it (here ``seed``)."""
    import dataclasses

    from zofl.tasks import load_task

    task = {"task": load_task(TASKS[TASK_RUNS[cls.method.name][0]])} if cls in TASK_STRATEGIES else {}
    base = cls.method.Params()
    for f in dataclasses.fields(base):  # the first number the checks accept at a value other than its default
        v = getattr(base, f.name)
        if isinstance(v, float) and not isinstance(v, bool) and v > 0:
            changed = dataclasses.replace(base, **{f.name: v / 2})
            try:
                cls(changed, **task)
            except Exception:  # noqa: BLE001 - a value its checks refuse: the next field
                continue
            break
    else:
        pytest.fail(f"{cls.__name__}: no float parameter to change")
    assert changed != base
    for strategy in (cls(changed, seed=7, **task), cls(params=changed, seed=7, **task)):
        assert strategy.params == changed and strategy.shared["seed"] == 7


def test_gather_reads_a_users_data_once_in_a_fixed_order_labels_as_int64():
    """``zofl.client.gather``: a pair of arrays or tensors as it is; a DataLoader in its dataset's order through its
    own collate_fn (its shuffling not used, its batch size kept; batch_size=None: one sample each); an iterable of
    mappings by ``batch_keys``; no batch at all as empty arrays; labels that are not one integer per input refused,
    naming what came."""
    from torch.utils.data import DataLoader, TensorDataset

    from zofl.client import gather

    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.int32) % 3
    gx, gy = gather((torch.tensor(x), torch.tensor(y)), ("img", "label"))
    assert np.array_equal(gx, x) and np.array_equal(gy, y) and gy.dtype == np.int64 and gx.flags.c_contiguous
    seen = []

    def collate(batch):  # the loader's own collate_fn, used by gather: it adds 1 to every input
        seen.append(len(batch))
        return torch.stack([b[0] for b in batch]) + 1, torch.stack([b[1] for b in batch])

    loader = DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=4, shuffle=True,
                        collate_fn=collate)
    gx, gy = gather(loader, ("img", "label"))
    assert np.array_equal(gx, x + 1) and np.array_equal(gy, y) and seen == [4, 4, 2]
    samples = DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=None, shuffle=True)
    gx, gy = gather(samples, ("img", "label"))  # a loader of single samples: one row each
    assert np.array_equal(gx, x) and np.array_equal(gy, y)
    batches = [{"label": torch.tensor(y[:6]), "img": torch.tensor(x[:6])}, {"img": x[6:], "label": y[6:]}]
    gx, gy = gather(batches, ("img", "label"))
    assert np.array_equal(gx, x) and np.array_equal(gy, y) and gy.dtype == np.int64
    gx, gy = gather([], ("img", "label"))
    assert (gx.shape, gx.dtype, gy.shape, gy.dtype) == ((0, 1), np.float32, (0,), np.int64)
    for bad, what in (((x, y[:9]), "10 inputs and labels of shape (9,), dtype int32"),
                      ((x, y.astype(np.float32)), "10 inputs and labels of shape (10,), dtype float32"),
                      ((x, np.stack([y, y], 1)), "10 inputs and labels of shape (10, 2), dtype int32")):
        with pytest.raises(ValueError, match=re.escape(f"zofl.client.train: the data give {what}: one integer")):
            gather(bad, ("img", "label"))
    with pytest.raises(ValueError, match="10 inputs and labels of shape .9,."):  # the same in batches
        gather([(x[:5], y[:5]), (x[5:], y[5:9])], ("img", "label"))


def test_a_users_model_keeps_its_dtype_and_loss_and_a_nodes_identity_fingerprints_its_inputs_and_labels():
    """``ModelTask``: a float64 model's gradient is float64 torch autograd's, with the user's loss where given
    (default cross-entropy); ``gather`` takes tensors that require grad; ``identity`` answers N_i and a fingerprint
    of inputs and labels both, or that the data hold no example."""
    from zofl.client import DATA_ERROR, ModelTask, gather, identity
    from zofl.core.protocol import CONFIG, DATA_FINGERPRINT, NUM_EXAMPLES

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 3)), np.array([0, 1, 1, 0, 1, 0])
    model = torch.nn.Linear(3, 2, bias=False).double()
    p = model.weight.detach().numpy().ravel().copy()

    def want(loss_fn):
        w = torch.tensor(p.reshape(2, 3), requires_grad=True)
        loss_fn(torch.tensor(x) @ w.T, torch.tensor(y)).backward()
        return w.grad.numpy().ravel()

    def twice(logits, labels):
        return 2.0 * torch.nn.functional.cross_entropy(logits, labels)

    for loss_fn in (None, twice):
        task = ModelTask(model, loss_fn, x, y)
        g = np.asarray(task.grad(p, x, y))
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, want(loss_fn or torch.nn.functional.cross_entropy), rtol=1e-13, atol=1e-15)
    gx, _ = gather((torch.tensor(x, requires_grad=True), torch.tensor(y)), ("img", "label"))
    np.testing.assert_array_equal(gx, x)

    ctx = Context(run_id=1, node_id=2, node_config={}, state=RecordDict(), run_config={})
    own = identity(ctx, x, y)[CONFIG]
    assert own[NUM_EXAMPLES] == 6
    other_x = identity(ctx, x + 1.0, y)[CONFIG][DATA_FINGERPRINT]
    other_y = identity(ctx, x, 1 - y)[CONFIG][DATA_FINGERPRINT]
    assert len({own[DATA_FINGERPRINT], other_x, other_y}) == 3
    assert dict(identity(ctx, x[:0], y[:0])[CONFIG]) == {DATA_ERROR: "this ClientApp's data hold no training example"}


def test_a_users_model_is_trained_on_its_own_device_and_a_model_with_no_parameters_is_refused():
    """``ModelTask`` takes the model's device (a CUDA model stays on the GPU; torch's "meta" device stands in for
    one here) and dtype from its parameters; a model with none has nothing to train: refused in one line."""
    from zofl.client import ModelTask

    x, y = np.zeros((4, 3)), np.array([0, 1, 0, 1])
    task = ModelTask(torch.nn.Linear(3, 2, device="meta", dtype=torch.float64), None, x, y)
    assert (task.device, task.dtype_name, task.size) == ("meta", "float64", 8)
    assert {t.device.type for t in task._params(np.zeros(8)).values()} == {"meta"}
    with pytest.raises(ValueError, match="^zofl.client.train: the model has no parameters: there is nothing to "
                                         "train$"):
        ModelTask(torch.nn.ReLU(), None, x, y)


def test_an_asynchronous_strategy_gives_flowers_result_and_evaluates_the_final_model_once():
    """FedBuffStrategy.start (Flower's Strategy.start signature): num_rounds server updates (3 by default), the
    train metrics of each in Flower's Result, and ``evaluate_fn(num_rounds, arrays)`` called once on the final
    model, its MetricRecord in Result.evaluate_metrics_serverapp."""
    from flwr.app import MetricRecord

    seen = []

    def evaluate_fn(rounds, arrays):
        seen.append((rounds, arrays["w"].numpy().copy()))
        return MetricRecord({"score": 0.5})

    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app")
    try:
        strategy = FedBuffStrategy(run_config={"local-steps": 1, "buffer-size": 2}, clock="simulated")
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3)))}),
                                evaluate_fn=evaluate_fn)
    finally:
        grid.close()
    assert len(strategy.records) == 4 and sorted(result.train_metrics_clientapp) == [1, 2, 3]
    assert [r for r, _ in seen] == [3] and np.array_equal(seen[0][1], result.arrays["w"].numpy())
    for r in (1, 2, 3):  # each update's record, the numbers Flower shows (strategies.app.round_metrics)
        assert dict(result.train_metrics_clientapp[r]) == round_metrics_of(strategy.records[r])
    assert dict(result.evaluate_metrics_serverapp) == {3: MetricRecord({"score": 0.5})}


def test_a_node_names_its_partition_only_with_both_keys():
    """zofl.client.node_claim: the partition-id and num-partitions of the node's config (as integers); -1 and 0 when
    it lacks either (the server then numbers the nodes itself)."""

    from zofl.client import node_claim
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID

    def claim(node_config):
        rec = node_claim(Context(run_id=1, node_id=2, node_config=node_config, state=RecordDict(), run_config={}))
        return rec[PARTITION_ID], rec[NUM_PARTITIONS]

    assert claim({PARTITION_ID: 3, NUM_PARTITIONS: 8}) == (3, 8)
    assert claim({PARTITION_ID: "5", NUM_PARTITIONS: 9.0}) == (5, 9)
    assert claim({PARTITION_ID: 3}) == (-1, 0) and claim({NUM_PARTITIONS: 8}) == (-1, 0) and claim({}) == (-1, 0)


def finishes(call, seconds: float = 120.0):
    """``call()`` in a thread of its own: what it returns, or a test failure when it has not returned within
    ``seconds`` (a start that waits forever; the thread is left behind)."""
    import threading

    out: dict = {}

    def run():
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds:.0f} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


ZEROS = ArrayRecord({"w": Array(np.zeros((2, 3)))})


def test_a_strategy_with_its_defaults_starts_on_two_supernodes_and_runs_flowers_rounds_and_deadline():
    """Flower's defaults: min_available_nodes = 2 (FedAvg's), so two SuperNodes are enough; ``start`` without
    num_rounds and timeout runs Strategy.start's 3 rounds, each with its 3600 s as the round deadline."""
    import inspect

    from flwr.serverapp.strategy import FedAvg, Strategy

    grid = InProcessGrid({}, 2, workers=0, client_app="plain_client:app")
    try:
        strategy = ZOHFLStrategy(run_config={"local-steps": 1}, wait_s=1.0, fraction_evaluate=0.0)
        result = strategy.start(grid=grid, initial_arrays=ZEROS)
    finally:
        grid.close()
    flower = inspect.signature(Strategy.start).parameters
    assert inspect.signature(FedAvg).parameters["min_available_nodes"].default == 2
    assert sorted(result.train_metrics_clientapp) == list(range(1, flower["num_rounds"].default + 1))
    assert len(strategy.records) == 4 and all(rec["participants"] == 2 for rec in strategy.records[1:])
    assert strategy.run.cfg.round_deadline_s == flower["timeout"].default == 3600


def test_a_strategy_made_but_not_started_holds_no_run_federation_or_writer_yet():
    """... and the documented defaults (docs/user-app.md): two SuperNodes (Flower's FedAvg's), waited for 120 s."""
    sync, asynchronous = ZOHFLStrategy(), FedBuffStrategy()
    assert sync.run is None and sync.fed is None and sync.writer is None
    assert asynchronous.fed is None and asynchronous.writer is None
    assert sync.min_available_nodes == asynchronous.min_available_nodes == 2
    assert sync.wait_s == asynchronous.wait_s == 120.0


@pytest.mark.parametrize("cls", [ZOHFLStrategy, FedBuffStrategy], ids=lambda c: c.__name__)
def test_results_dir_gets_zofl_s_run_folder_with_the_runs_records_and_settings(cls, tmp_path):
    """``results_dir``: the run folder ``zofl plot`` reads (rounds.jsonl: the records ``strategy.records`` holds,
    config.json: the run's settings, FedBuff's clock the strategy's default "wall", not zofl run's "simulated")."""
    from zofl.results import read_rounds

    extra = {"buffer-size": 2} if cls is FedBuffStrategy else {}
    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app")
    try:
        strategy = cls(run_config={"local-steps": 1, **extra}, results_dir=str(tmp_path / "run"),
                       **({} if cls is FedBuffStrategy else {"fraction_evaluate": 0.0}))
        strategy.start(grid=grid, initial_arrays=ZEROS, num_rounds=2)
    finally:
        grid.close()
    written = read_rounds(tmp_path / "run")
    assert [rec["round"] for rec in written] == [0, 1, 2]
    assert [rec["participants"] for rec in written] == [rec["participants"] for rec in strategy.records]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["strategy"] == cls.method.name
    if cls is FedBuffStrategy:
        assert config["clock"] == "wall" and strategy.cfg.clock == "wall"


def test_the_evaluation_is_flowers_fedavg_with_the_strategys_sampling_weighting_key_and_aggregation():
    """fraction_evaluate, min_evaluate_nodes, weighted_by_key and evaluate_metrics_aggr_fn reach Flower's FedAvg:
    of three nodes, fraction 0.1 samples int(0.3) = 0, so min_evaluate_nodes = 1 evaluates one; its answer reaches
    the user's aggregation with the user's key, and the aggregate is the Result's."""
    from flwr.app import MetricRecord
    from userapp.task import Net

    seen = []

    def aggregate(contents, key):
        seen.append((len(contents), key))
        return MetricRecord({"answers": len(contents)})

    grid = InProcessGrid({"strategy": "zohfl"}, 3, workers=0, client_app="userapp.client_app:app")
    try:
        strategy = ZOHFLStrategy(run_config={"local-steps": 1}, fraction_evaluate=0.1, min_evaluate_nodes=1,
                                 weighted_by_key="eval_loss", evaluate_metrics_aggr_fn=aggregate)
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=1)
    finally:
        grid.close()
    assert seen == [(1, "eval_loss")]
    assert dict(result.evaluate_metrics_clientapp) == {1: MetricRecord({"answers": 1})}


def test_one_supernode_is_enough_when_min_available_nodes_is_one_for_training_and_evaluation():
    """min_available_nodes = 1 holds for Flower's evaluation too (its FedAvg would otherwise wait for a second
    node forever, before the first evaluation)."""
    grid = InProcessGrid({}, 1, workers=0, client_app="plain_client:app")
    try:
        strategy = ZOHFLStrategy(run_config={"local-steps": 1}, min_available_nodes=1, min_evaluate_nodes=1)
        finishes(lambda: strategy.start(grid=grid, initial_arrays=ZEROS, num_rounds=1), 60.0)
    finally:
        grid.close()
    assert len(strategy.records) == 2 and strategy.records[1]["participants"] == 1


def test_starts_timeout_is_each_of_flowers_rounds_deadline(monkeypatch):
    """``timeout`` reaches Flower's round loop: every train and evaluate round is sent through the deadline Grid
    with it (observed on DeadlineGrid.send_and_receive, which still does the work: no real wait)."""
    from zofl.strategies.deadline import DeadlineGrid

    seen, send = [], DeadlineGrid.send_and_receive

    def observed(self, messages, *, timeout=None):
        messages = list(messages)
        seen.extend((m.metadata.message_type, timeout) for m in messages)
        return send(self, messages, timeout=timeout)

    monkeypatch.setattr(DeadlineGrid, "send_and_receive", observed)
    grid = InProcessGrid({}, 2, workers=0, client_app="plain_client:app")
    try:
        strategy = ZOHFLStrategy(run_config={"local-steps": 1})
        finishes(lambda: strategy.start(grid=grid, initial_arrays=ZEROS, num_rounds=1, timeout=600.0), 90.0)
    finally:
        grid.close()
    assert strategy.run.cfg.round_deadline_s == 600.0
    assert set(seen) == {("train", 600.0), ("evaluate", 600.0)}, seen


class Watched(ZOHFLStrategy):
    """A user's subclass that keeps the messages each round sends and sets the model back to zeros after round 1
    (a server step of its own between Flower's rounds)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.train_sent, self.evaluate_sent = {}, {}

    def configure_train(self, server_round, arrays, config, grid):
        self.train_sent[server_round] = list(super().configure_train(server_round, arrays, config, grid))
        return self.train_sent[server_round]

    def configure_evaluate(self, server_round, arrays, config, grid):
        self.evaluate_sent[server_round] = list(super().configure_evaluate(server_round, arrays, config, grid))
        return self.evaluate_sent[server_round]

    def aggregate_train(self, server_round, replies):
        arrays, metrics = super().aggregate_train(server_round, replies)
        return (ZEROS if server_round == 1 else arrays), metrics


def test_start_hands_train_config_evaluate_config_and_evaluate_fn_to_flowers_rounds_and_flower_owns_x():
    """train_config's entries reach every train message beside zofl's own (its "round" and "H" do not replace
    zofl's), evaluate_config's every evaluate message, evaluate_fn sees the model before round 1 and after each;
    the arrays Flower hands configure_train are the x a round sends (here zeros again after round 1)."""
    from flwr.app import MetricRecord

    calls = []

    def evaluate_fn(server_round, arrays):
        calls.append(server_round)
        return MetricRecord({"norm": float(np.abs(arrays["w"].numpy()).sum())})

    grid = InProcessGrid({}, 3, workers=0, client_app="plain_client:app")
    try:
        strategy = Watched(run_config={"local-steps": 1}, eta=0.5, gamma=0.5)
        result = strategy.start(grid=grid, initial_arrays=ZEROS, num_rounds=2,
                                train_config=ConfigRecord({"lr": 0.25, "round": 99, "H": 99}),
                                evaluate_config=ConfigRecord({"tag": 7}), evaluate_fn=evaluate_fn)
    finally:
        grid.close()
    for server_round, sent in strategy.train_sent.items():
        assert len(sent) == 3
        for msg in sent:
            config = msg.content["config"]
            assert (config["lr"], config["round"], config["H"]) == (0.25, server_round - 1, 1)
    assert all(msg.content["config"]["tag"] == 7 for sent in strategy.evaluate_sent.values() for msg in sent)
    assert sorted(strategy.evaluate_sent) == [1, 2] and calls == [0, 1, 2]
    assert sorted(result.evaluate_metrics_serverapp) == [0, 1, 2]
    assert np.any(result.arrays["w"].numpy() != 0)  # the round-2 model moved from zeros
    assert all(np.array_equal(msg.content["arrays"]["w"].numpy(), np.zeros((2, 3))) for msg in strategy.train_sent[2])
    with pytest.raises(ValueError, match=r"^the arrays Flower handed configure_train are not the model start\(\) "
                                         r"was given$"):
        strategy.configure_train(3, ArrayRecord({"v": Array(np.zeros(6))}), ConfigRecord(), grid)


def test_the_apps_node_map_waits_polls_asks_once_within_the_deadline_and_refuses_an_error_alone(monkeypatch, caplog,
                                                                                                as_the_serverapp):
    """``nodes.learn_app_nodes`` on a stand-in Grid: it polls every 0.2 s until min_available_nodes have connected
    (here at the third look), asks each node once (all remembered as asked), waits for the answers at most what is
    left of wait_s (at least 1 s), and a node whose reply is an error is refused alone with the first 200 characters
    of its reason; too few nodes by the deadline is a one-line error naming both numbers."""
    from types import SimpleNamespace

    from flwr.app import MetricRecord

    import zofl.strategies.nodes as nodes_mod
    from zofl.core.protocol import CONFIG, DATA_FINGERPRINT, METRICS, NUM_EXAMPLES, NUM_PARTITIONS, PARTITION_ID
    from zofl.strategies.nodes import NO_DATA, NO_PARTITION, learn_app_nodes

    def answer(node, pid, parts=2):
        content = RecordDict({METRICS: MetricRecord({PARTITION_ID: pid, NUM_PARTITIONS: parts}),
                              CONFIG: ConfigRecord({NUM_EXAMPLES: 5, DATA_FINGERPRINT: "f" * 16})})
        return SimpleNamespace(metadata=SimpleNamespace(src_node_id=node), has_error=lambda: False, content=content)

    def error(node, reason):
        return SimpleNamespace(metadata=SimpleNamespace(src_node_id=node), has_error=lambda: True,
                               error=SimpleNamespace(reason=reason))

    class Grid:
        def __init__(self, looks_until_all):
            self.looks, self.until, self.sent, self.timeouts = 0, looks_until_all, [], []

        def get_node_ids(self):
            self.looks += 1
            return [10, 20, 30] if self.looks >= self.until else [10]

        def send_and_receive(self, messages, timeout=None):
            self.sent.append([m.metadata.dst_node_id for m in messages])
            self.timeouts.append(timeout)
            return [answer(10, 0), answer(20, 1), error(30, "E" * 300)]

    slept = []
    monkeypatch.setattr(nodes_mod.time, "sleep", slept.append)
    grid = Grid(looks_until_all=3)
    fed, m = learn_app_nodes(grid, 3, 60.0, ArrayRecord())
    assert slept == [0.2, 0.2] and grid.sent == [[10, 20, 30]] and fed.asked == {10, 20, 30}
    assert 59.0 < grid.timeouts[0] <= 60.0
    assert (m, fed.nodes) == (2, {0: 10, 1: 20}) and fed.sizes == {0: 5, 1: 5}
    assert fed.fingerprints == {0: "f" * 16, 1: "f" * 16} and 0 <= fed.learned_s < 60
    assert fed.refused == [(30, NO_PARTITION, NO_DATA)] and fed.data_errors == {30: "E" * 200}
    # deployed SuperNodes without a partition-id (-1 of 0): client ids in node-id order, each keeping its N_i
    grid = Grid(looks_until_all=1)
    grid.send_and_receive = lambda messages, timeout=None: [answer(30, -1, 0), answer(10, -1, 0)]
    with caplog.at_level("INFO", logger="zofl"):
        fed, m = learn_app_nodes(grid, 2, 60.0, ArrayRecord())
    assert (m, fed.nodes, fed.sizes) == (2, {0: 10, 1: 30}, {0: 5, 1: 5}) and fed.fingerprints[1] == "f" * 16
    assert ("the SuperNodes name no partitions of one federation: client ids 0..1 in the order of their node ids"
            in caplog.messages)
    # partitions that are not those of one federation: two nodes naming one partition, a partition-id >= its
    # num-partitions, two num-partitions: numbered in node-id order instead (no client lost, none held twice)
    for replies in ([answer(30, 0), answer(10, 0)], [answer(30, 1), answer(10, 2)], [answer(30, 0, 3),
                                                                                    answer(10, 1)]):
        grid.send_and_receive = lambda messages, timeout=None, replies=replies: replies
        fed, m = learn_app_nodes(grid, 2, 60.0, ArrayRecord())
        assert (m, fed.nodes) == (2, {0: 10, 1: 30}), replies
    grid.send_and_receive = lambda messages, timeout=None: [error(10, "no"), error(30, "no")]
    with pytest.raises(ConfigError, match=r"^none of the 3 SuperNode\(s\) gave a usable answer: is "
                                          r"zofl.client.train their ClientApp's @app.train\(\)\?$"):
        learn_app_nodes(grid, 2, 60.0, ArrayRecord())
    grid = Grid(looks_until_all=1)
    learn_app_nodes(grid, 3, 0.01, ArrayRecord())
    assert grid.timeouts == [1.0]  # at least a second for the answers
    with pytest.raises(ConfigError, match=r"^min_available_nodes=3, but 1 SuperNode\(s\) connected within 0s: start "
                                          r"more SuperNodes"):
        learn_app_nodes(Grid(looks_until_all=10**9), 3, 0.0, ArrayRecord())


ROUND_METRICS = ("participants", "dropped", "failed", "rejected", "late", "steps", "f2_est", "gamma_r", "uplink_bytes")


def round_metrics_of(record):
    return {k: float(record[k]) for k in ROUND_METRICS
            if isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)}


def test_round_metrics_are_the_records_numbers_flower_shows():
    """``round_metrics``: a round record's numbers among ROUND_METRICS as Flower's train MetricRecord, as floats;
    booleans, None and other fields left out."""
    from zofl.strategies.app import round_metrics

    record = {k: i + 1 for i, k in enumerate(ROUND_METRICS)}
    record.update({"round_failed": True, "test_acc": 0.5, "sampled": [1, 2]})
    assert dict(round_metrics(record)) == {k: float(i + 1) for i, k in enumerate(ROUND_METRICS)}
    assert dict(round_metrics({"participants": 2, "dropped": None, "late": True})) == {"participants": 2.0}


def test_the_settings_a_train_message_carries_are_the_non_defaults_as_sorted_json():
    """``settings_text``: what differs from the defaults, keys sorted (the text is the same for the same settings
    whatever order they were given in), nothing for a run of defaults."""
    from zofl.config import parse_config
    from zofl.strategies.app import settings_text

    assert settings_text(parse_config({})) == "{}"
    assert settings_text(parse_config({"strategy": "scaffold", "beta": 0.25})) == \
        '{"beta": 0.25, "strategy": "scaffold"}'


def test_each_distinct_model_is_sent_in_the_users_names_and_settings_too_long_are_refused_at_once(as_the_serverapp):
    """``AppRun._address``: a message per client, the model in the user's names (one record per distinct x, each
    client's own), the client id and the settings; settings longer than a train message carries are refused by the
    server before round 1, naming both lengths; initial_arrays of a size the bilevel task's x does not have too."""
    from zofl.core.protocol import ARRAYS, CONFIG
    from zofl.strategies.wire import APP_CLIENT_ID, APP_SETTINGS

    strategy = ZOHFLStrategy(run_config={"local-steps": 1})
    strategy.layout, strategy.settings_json = (("w", (2,), "float64"),), '{"local-steps": 1}'
    xs = [Array(np.array([1.0, 2.0])), Array(np.array([3.0, 4.0]))]  # the first sent to two clients, as x_r is
    msgs = [Message(RecordDict({ARRAYS: ArrayRecord({"x": x}), CONFIG: ConfigRecord({"round": 0})}),
                    dst_node_id=5, message_type="train") for x in xs + [xs[0]]]
    out = strategy._address(msgs, [7, 8, 9])
    assert [m.content.array_records[ARRAYS]["w"].numpy().tolist() for m in out] == [[1.0, 2.0], [3.0, 4.0],
                                                                                      [1.0, 2.0]]
    assert [m.content.config_records[CONFIG][APP_CLIENT_ID] for m in out] == [7, 8, 9]
    assert all(m.content.config_records[CONFIG][APP_SETTINGS] == '{"local-steps": 1}' for m in out)

    def start(strategy):
        grid = InProcessGrid({}, 2, workers=0, client_app="plain_client:app")
        try:
            strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3)))}), num_rounds=1)
        finally:
            grid.close()
        return strategy

    # (every key a user's App takes is short: the bound is met with many clients' lists, here with a lower bound)
    n = len(start(ZOHFLStrategy(run_config={"local-steps": 1})).settings_json)
    import zofl.strategies.app as app_mod

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(app_mod, "MAX_APP_SETTINGS", n)
        start(ZOHFLStrategy(run_config={"local-steps": 1}))  # exactly what a message carries: taken
        mp.setattr(app_mod, "MAX_APP_SETTINGS", n - 1)
        with pytest.raises(ConfigError, match=rf"^the run's settings take {n} characters, more than the {n - 1} a "
                                              rf"train message carries"):
            start(ZOHFLStrategy(run_config={"local-steps": 1}))
