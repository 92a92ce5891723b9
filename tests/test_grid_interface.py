"""The parts of Flower's Grid and Strategy interfaces our engines implement but do not call themselves: what a
Flower runtime, a user's App or a reader following Flower's conventions would call (found unreached by the
whole-package mutation run, docs/testing.md)."""
import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.supercore.run import Run

from zofl.inprocess import InProcessGrid
from zofl.server_app import make_run
from zofl.strategies.asynchronous import AsyncStrategy
from zofl.strategies.deadline import DeadlineGrid
from zofl.strategies.nodes import learn_partitions
from zofl.strategies.wire import array_record, client_of_message, decode_work


def test_the_in_process_grid_makes_messages_and_keeps_its_run_as_flower_s_grids_do():
    grid = InProcessGrid({}, 2, workers=0)
    msg = grid.create_message(RecordDict({"c": ConfigRecord({"k": 1})}), "train", 7, "g3", ttl=30.0)
    assert isinstance(msg, Message) and msg.metadata.dst_node_id == 7 and msg.metadata.message_type == "train"
    assert msg.metadata.group_id == "g3" and msg.metadata.ttl == 30.0 and msg.content["c"]["k"] == 1
    run = Run.create_empty(99)
    grid.set_run(run)
    assert grid.run is run


def test_the_deadline_grid_passes_messages_and_the_run_to_the_grid_it_wraps():
    inner = InProcessGrid({}, 2, workers=0)
    grid = DeadlineGrid(inner)
    msg = grid.create_message(RecordDict(), "query", 5, "g", ttl=12.0)
    assert (msg.metadata.dst_node_id, msg.metadata.message_type, msg.metadata.group_id, msg.metadata.ttl) == \
        (5, "query", "g", 12.0)
    run = Run.create_empty(42)
    grid.set_run(run)
    assert inner.run is run and grid.run is run


def test_the_asynchronous_strategy_s_configure_train_is_one_task_of_the_method(tmp_path):
    """configure_train, written for readers who know Flower's synchronous strategies: one train message for the
    client ``config['pid']``, to its node, holding the work the method plans for that task on that model."""
    rc = {"strategy": "fedbuff", "engine": "async", "num-clients": 3, "num-rounds": 2, "output-dir": str(tmp_path),
          "run-name": "r"}
    cfg, method, writer = make_run(rc)
    grid = InProcessGrid(rc, 3, workers=0)
    with writer:
        fed = learn_partitions(grid, 3, 30.0)
        strategy = AsyncStrategy(cfg, method, writer, fed)
        x = method.init()["x"] + 0.25
        (msg,) = strategy.configure_train(0, array_record({"x": x}), ConfigRecord({"task": 4, "pid": 2}), grid)
    assert msg.metadata.dst_node_id == fed.nodes[2] and client_of_message(msg) == 2
    got, want = decode_work(msg.content, 2), method.plan_task({"x": x}, 0, 4, 2)
    assert (got.pid, got.round, got.H, got.config) == (want.pid, want.round, want.H, want.config)
    assert got.arrays.keys() == want.arrays.keys()
    assert all(np.array_equal(got.arrays[k], want.arrays[k]) for k in want.arrays)


def test_a_legacy_failure_is_named_by_its_client_and_status_or_by_its_exception():
    """``legacy.describe``: what Flower's legacy server puts in aggregate_fit's failures, a (proxy, FitRes) of a
    client that answered with a status other than OK (named by the proxy's client, ``ClientOnNode.pid``), a
    ``ClientFailed`` (the exception of a proxy's client, named by it) or any other exception (named by nobody)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.compat.grid_client_proxy import GridClientProxy

    from zofl.strategies.legacy import ClientFailed, ClientOnNode, describe

    res = FitRes(Status(Code.FIT_NOT_IMPLEMENTED, "no fit here"), ndarrays_to_parameters([]), 0, {})
    grid = InProcessGrid({}, 1, workers=0)
    try:
        proxy = ClientOnNode(GridClientProxy(1234, grid, 1), 7)
        assert (proxy.node_id, proxy.cid, proxy.pid) == (1234, "7", 7)
        assert describe((proxy, res)) == (7, "status FIT_NOT_IMPLEMENTED: no fit here")
    finally:
        grid.close()
    assert describe(TimeoutError("late")) == (None, "TimeoutError: late")
    assert describe(ClientFailed(3, ValueError("bad"))) == (3, "ValueError: bad")
