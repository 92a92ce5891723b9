"""Many clients per simulated SuperNode (issue 51, run-config clients-per-node): the shares, the server's map, the
ClientApp's checks, the clients' state, and the numbers of one node per client, bit for bit (in-process here; through
Ray in tests/test_flower_e2e.py, whose AFBO and resume runs share their nodes)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from zofl.client_app import app as client_app
from zofl.client_app import named_client, node_clients
from zofl.config import ConfigError, clients_per_node, parse_config
from zofl.core import client_state
from zofl.core.protocol import CONFIG, METRICS, NUM_PARTITIONS, PARTITION_ID, QUERY_PARTITION, TRAIN
from zofl.core.shares import AUTO_NODES, node_of, num_nodes, share
from zofl.core.shares import clients_per_node as k_of
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds, read_run_json
from zofl.strategies.nodes import Answer, Federation, _claim, read_answer
from zofl.strategies.wire import APP_CLIENT_ID


@pytest.mark.parametrize("m", [1, 7, 100, 101, 250, 10_000])
@pytest.mark.parametrize("key", [0, 1, 3, 64])
def test_the_shares_cover_every_client_once(m, key):
    k = k_of(m, key)
    nodes = num_nodes(m, k)
    clients = [c for j in range(nodes) for c in share(j, m, k)]
    assert clients == list(range(m))
    assert all(node_of(c, k) == j for j in range(nodes) for c in share(j, m, k))
    assert all(len(share(j, m, k)) >= 1 for j in range(nodes))


def test_auto_keeps_a_node_per_client_up_to_its_bound_and_few_nodes_beyond():
    assert k_of(AUTO_NODES, 0) == 1 and k_of(AUTO_NODES + 1, 0) == 2
    assert num_nodes(10_000, k_of(10_000, 0)) == AUTO_NODES and num_nodes(1_000, k_of(1_000, 0)) == AUTO_NODES
    assert k_of(5, 9) == 5 and k_of(500, 7) == 7


@pytest.mark.parametrize("keys, k", [
    ({}, 1), ({"clients-per-node": 3}, 3), ({"num-clients": 150}, 2),
    ({"clients-per-node": 3, "engine": "legacy"}, 3),  # a ClientProxy per client (legacy.ClientOnNode)
    ({"clients-per-node": 3, "strategy": "flwr-fedavg"}, 3),  # Flower's FedAvg samples clients (ClientsGrid)
    ({"clients-per-node": 3, "strategy": "flwr-fedavg", "engine": "legacy"}, 3),  # (legacy.ClientsOfNodes)
    ({"clients-per-node": 3, "server-data": "none", "federated-eval": True, "strategy": "fedavg"}, 3),
    ({"clients-per-node": 3, "strategy": "fedbuff", "engine": "async"}, 3),
])
def test_which_runs_share_their_nodes(keys, k):
    assert clients_per_node(parse_config({"num-clients": 12, **keys})) == k


# -- the server's map ---------------------------------------------------------------------------------------------

class _Msg:
    def __init__(self, node, pid, parts, own=None):
        self.metadata = type("M", (), {"src_node_id": node})()
        self.content = RecordDict({METRICS: MetricRecord({PARTITION_ID: pid, NUM_PARTITIONS: parts}),
                                   **({CONFIG: ConfigRecord(own)} if own is not None else {})})

    def has_error(self):
        return False


def test_a_node_claims_its_share_or_one_client_and_a_second_claim_is_refused():
    fed = Federation({}, k=3)  # m = 7: nodes of 3, 3 and 1 clients
    for node, pid in ((11, 0), (12, 1), (13, 2)):
        _claim(fed, _Msg(node, pid, 3), 7)
    assert fed.nodes == {0: 11, 1: 11, 2: 11, 3: 12, 4: 12, 5: 12, 6: 13}
    _claim(fed, _Msg(14, 1, 3), 7)  # share 1 again
    _claim(fed, _Msg(15, 5, 7), 7)  # one client of 7 (a node per client), held in share 1
    _claim(fed, _Msg(16, 3, 3), 7)  # no share 3 of 3
    assert fed.nodes[3] == 12 and fed.nodes[5] == 12
    assert [(n, h) for n, _, h in fed.refused] == [(14, 12), (15, 12), (16, -1)]
    assert fed.claims(Answer(2, 3), 7) == [6] and fed.claims(Answer(2, 7), 7) == [2]
    assert Federation({}).claims(Answer(0, 3), 7) is None  # k = 1: a share is no partition of this run


def test_a_share_whose_clients_are_held_by_several_nodes_is_refused_naming_the_first(caplog):
    """A node claiming a share of which clients are served already, by different nodes (one-client nodes, the layout
    of num-partitions = m): refused, its refusal naming the holder of the first taken client, and logged."""
    import logging

    fed = Federation({}, k=3)  # m = 7: shares 0..2, 3..5, 6
    _claim(fed, _Msg(21, 1, 7), 7)  # client 1 alone
    _claim(fed, _Msg(22, 2, 7), 7)  # client 2 alone
    with caplog.at_level(logging.WARNING, logger="zofl"):
        _claim(fed, _Msg(23, 0, 3), 7)  # share 0: clients 0..2
    assert fed.nodes == {1: 21, 2: 22} and fed.refused == [(23, 0, 21)]
    assert caplog.records[-1].getMessage() == ("SuperNode 23 claims clients 0..2, of which client 1 is served by "
                                               "SuperNode 21: refused, it gets no work")


def test_a_share_node_s_sizes_are_each_client_s_and_a_bad_report_is_refused_alone():
    """server-data = none: a node reports N_i and a fingerprint per client of its share (lists in share order);
    lists of another length than its share, a size out of range or lists where it claims one client: that node is
    refused, named, and the others hold their clients."""
    fed = Federation({}, k=3)  # m = 7: shares 0..2, 3..5, 6
    _claim(fed, _Msg(11, 0, 3, {"num-examples": [5, 6, 7], "data-fingerprint": ["a", "b", "c"]}), 7)
    _claim(fed, _Msg(12, 1, 3, {"num-examples": [5, 6], "data-fingerprint": ["a", "b"]}), 7)  # 2 for 3 clients
    _claim(fed, _Msg(13, 2, 3, {"num-examples": [0], "data-fingerprint": ["z"]}), 7)  # a size of 0
    _claim(fed, _Msg(14, 4, 7, {"num-examples": [8, 9], "data-fingerprint": ["x", "y"]}), 7)  # one client, 2 sizes
    _claim(fed, _Msg(15, 6, 7, {"num-examples": [8], "data-fingerprint": ["x"]}), 7)  # one client, one of each
    assert fed.sizes == {0: 5, 1: 6, 2: 7, 6: 8} and fed.fingerprints == {0: "a", 1: "b", 2: "c", 6: "x"}
    assert sorted(fed.data_errors) == [12, 13, 14]
    assert "data of 2 clients for its share of 3" in fed.data_errors[12]
    assert "not an integer in [1, 2^40]" in fed.data_errors[13] and "reports the data of 2" in fed.data_errors[14]
    assert sorted(fed.nodes) == [0, 1, 2, 6]


@pytest.mark.parametrize("own", [
    {"num-examples": [5, 6, 7], "data-fingerprint": "abc"},  # one list, one not
    {"num-examples": 5, "data-fingerprint": ["a", "b", "c"]},
    {"num-examples": [5, 6, 7], "data-fingerprint": ["a", "b"]},  # lengths that differ
    {"num-examples": [], "data-fingerprint": []},
    {"num-examples": [5, 6, 7], "data-fingerprint": ["a", "", "c"]},  # an empty fingerprint
])
def test_a_share_s_reports_must_be_two_lists_of_one_length(own):
    answer = read_answer(_Msg(11, 0, 3, own))
    assert answer.error is not None and answer.num_examples is None and (answer.pid, answer.parts) == (0, 3)


def test_a_share_may_report_on_as_many_clients_as_the_bound(monkeypatch):
    from zofl.strategies import nodes

    monkeypatch.setattr(nodes, "MAX_SHARE", 3)
    ok = read_answer(_Msg(11, 0, 3, {"num-examples": [5, 6, 7], "data-fingerprint": ["a", "b", "c"]}))
    assert ok.error is None and ok.num_examples == (5, 6, 7) and ok.of_client(2) == Answer(0, 3, 7, "c")
    assert read_answer(_Msg(11, 0, 3, {"num-examples": [5, 6, 7, 8],
                                        "data-fingerprint": ["a", "b", "c", "d"]})).error is not None


# -- the ClientApp ----------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _server_identity(as_the_serverapp):
    """Messages are made as a ServerApp makes them (Flower reads the task's identity)."""


RUN = {"num-clients": 7, "clients-per-node": 3, "num-rounds": 2, "strategy": "scaffold", "beta": 1.0}


def _context(pid, parts, **keys):
    return Context(run_id=99, node_id=5, node_config={PARTITION_ID: pid, NUM_PARTITIONS: parts}, state=RecordDict(),
                   run_config={**RUN, **keys})


def test_a_node_serves_its_share_and_refuses_the_rest():
    cfg = parse_config(RUN)
    assert node_clients(_context(1, 3), cfg) == range(3, 6)
    assert node_clients(_context(2, 3), cfg) == range(6, 7)
    assert node_clients(_context(4, 7), cfg) == range(4, 5)  # a node of one client still works
    with pytest.raises(ConfigError, match=r"partition-id=3, num-partitions=3.*or num-partitions=3 with "
                                          r"clients-per-node=3"):
        node_clients(_context(3, 3), cfg)


def _train(context, pid, config=None):
    x = np.zeros(65 * 10)
    cfg = {"round": 1, "H": 1, **({APP_CLIENT_ID: pid} if pid is not None else {}), **(config or {})}
    msg = Message(RecordDict({"arrays": ArrayRecord({"x": _array(x)}), CONFIG: ConfigRecord(cfg)}),
                  dst_node_id=5, message_type=TRAIN)
    return client_app(msg, context)


def _array(x):
    from flwr.app import Array

    return Array(x)


@pytest.mark.parametrize("pid, words", [
    (2, "serves clients 3..5, not client 2"),
    (None, "serves clients 3..5: the message names none"),
])
def test_work_for_a_client_the_node_does_not_serve_is_refused_alone(pid, words):
    """The ClientApp raises (Flower's engine turns it into that message's error reply; the others go on)."""
    with pytest.raises(ConfigError, match=words):
        _train(_context(1, 3), pid)


@pytest.mark.parametrize("value", [True, "3", 3.0])
def test_a_client_id_that_is_not_an_integer_is_refused(value):
    msg = Message(RecordDict({CONFIG: ConfigRecord({APP_CLIENT_ID: value})}), dst_node_id=5, message_type=TRAIN)
    with pytest.raises(ConfigError, match="not an integer"):
        named_client(msg)


def _legacy(context, pid, evaluate=False):
    """A legacy-API FitIns or EvaluateIns (as Flower's GridClientProxy sends it) naming ``pid``, to the ClientApp."""
    from flwr.common import EvaluateIns, FitIns, ndarrays_to_parameters
    from flwr.compat.common.recorddict_compat import evaluateins_to_recorddict, fitins_to_recorddict

    from zofl.client_app import prepared

    _, task, spec = prepared(context.run_config)
    test = task.test_data(spec)
    params = ndarrays_to_parameters([task.init_params(test.x.shape[1], test.num_classes)])
    config = {"round": 1, "H": 1, **({APP_CLIENT_ID: pid} if pid is not None else {})}
    content = (evaluateins_to_recorddict(EvaluateIns(params, config), True) if evaluate
               else fitins_to_recorddict(FitIns(params, config), True))
    return client_app(Message(content, dst_node_id=5, message_type="evaluate" if evaluate else TRAIN), context)


@pytest.mark.parametrize("evaluate", [False, True])
def test_a_legacy_message_is_served_as_the_client_it_names(evaluate):
    """The legacy API's FitIns and EvaluateIns name their client in their own config record ("fitins.config",
    "evaluateins.config"): a share's node runs that client, and refuses one outside its share or none named."""
    from flwr.compat.common.recorddict_compat import recorddict_to_evaluateres, recorddict_to_fitres

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLWR_HOME", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"zofl-test-shares-{os.getpid()}"))
        reply = _legacy(_context(1, 3, strategy="fedavg", **{"federated-eval": True}), 4, evaluate)
        assert not reply.has_error()
        if evaluate:
            res = recorddict_to_evaluateres(reply.content)
            assert res.num_examples > 0 and 0.0 <= res.metrics["eval_acc"] <= 1.0
        else:
            assert recorddict_to_fitres(reply.content, False).metrics["pid"] == 4
    for pid, words in [(2, "serves clients 3..5, not client 2"), (None, "the message names none")]:
        with pytest.raises(ConfigError, match=words):
            _legacy(_context(1, 3), pid, evaluate)


def test_flowers_fedavg_samples_the_clients_of_connected_nodes_and_sends_each_to_its_node():
    """``ClientsGrid``: Flower's Message-API FedAvg sees the held clients whose node is connected as its "nodes";
    ``to_client_nodes`` sends each of its messages to that client's node, naming the client, the arrays shared."""
    from zofl.strategies.flwr_fedavg import ClientsGrid, to_client_nodes

    fed = Federation({0: 50, 1: 50, 2: 60, 3: 70})

    class Grid:
        def get_node_ids(self):
            return [70, 50, 99]  # node 60 has left; 99 holds nothing

    assert ClientsGrid(Grid(), fed).get_node_ids() == [0, 1, 3]
    shared = ArrayRecord({"x": _array(np.arange(3.0))})
    content = RecordDict({"arrays": shared, CONFIG: ConfigRecord({"round": 2, "H": 4})})
    msgs = to_client_nodes([Message(content, dst_node_id=pid, message_type=TRAIN) for pid in (3, 0)], fed.nodes)
    assert [(m.metadata.dst_node_id, m.metadata.message_type) for m in msgs] == [(70, TRAIN), (50, TRAIN)]
    assert [dict(m.content.config_records[CONFIG]) for m in msgs] == [{"round": 2, "H": 4, APP_CLIENT_ID: 3},
                                                                       {"round": 2, "H": 4, APP_CLIENT_ID: 0}]
    assert all(m.content.array_records["arrays"] is shared for m in msgs)
    assert dict(content.config_records[CONFIG]) == {"round": 2, "H": 4}  # Flower's record is left as it was


def test_flowers_legacy_fedavg_samples_clients_and_waits_for_the_nodes_that_serve_them():
    """``legacy.ClientsOfNodes``: a proxy per held client whose node Flower's manager holds (cid = the client id);
    waiting for n clients is waiting for the ceil(n / k) nodes that serve them."""
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy

    from zofl.strategies.legacy import ClientsOfNodes

    nodes = SimpleClientManager()
    for node in (50, 70):
        nodes.register(GridClientProxy(node, None, 1))
    fed = Federation({0: 50, 1: 50, 2: 60, 3: 60, 4: 70}, k=2)
    waited = []
    nodes.wait_for = lambda n, timeout=86400: waited.append((n, timeout)) or True
    clients = ClientsOfNodes(fed, nodes)
    assert {cid: (p.pid, p.node_id) for cid, p in clients.all().items()} == {"0": (0, 50), "1": (1, 50),
                                                                             "4": (4, 70)}
    assert clients.wait_for(5, 30) is False and waited == [(3, 30)]  # 5 clients need 3 nodes; 2 and 3 are away
    nodes.register(GridClientProxy(60, None, 1))
    assert clients.wait_for(5) is True and len(clients.all()) == 5 and waited[-1] == (3, 86400)


def test_the_partition_query_of_a_share_node_says_its_node_config():
    msg = Message(RecordDict(), dst_node_id=5, message_type=QUERY_PARTITION)
    rec = client_app(msg, _context(2, 3)).content.metric_records[METRICS]
    assert (rec[PARTITION_ID], rec[NUM_PARTITIONS]) == (2, 3)


def test_each_client_of_a_node_keeps_its_own_state(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    ctx = _context(1, 3)
    saved = {}
    for pid in (3, 4):
        state = {"c": np.full(3, float(pid))}
        client_state.save(ctx.run_id, pid, state)
        saved[pid] = state
    assert all(np.array_equal(client_state.load(ctx.run_id, p)["c"], saved[p]["c"]) for p in (3, 4))
    assert client_state.load(ctx.run_id, 5) == {}
    assert sorted(p.name for p in client_state.run_dir(ctx.run_id).iterdir()) == ["client-3.npz", "client-4.npz"]
    client_state.remove(ctx.run_id)
    assert not client_state.run_dir(ctx.run_id).exists()


def test_a_client_s_state_file_is_replaced_whole_from_beside_it_and_never_unpickled(tmp_path, monkeypatch):
    """save writes a temporary file in the state's own folder and renames it (a rename is whole only within one
    file system), leaves nothing behind and the old file as it was when writing fails; load reads arrays only (a
    planted object array is refused, never unpickled)."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    client_state.save(7, 1, {"c": np.ones(2)})
    target = client_state.path(7, 1)
    assert target == tmp_path / "zofl-client-state" / "run-7" / "client-1.npz"  # under the node's FLWR_HOME
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((Path(a), Path(b))), real_replace(a, b))[1])
    client_state.save(7, 1, {"c": np.full(2, 2.0)})
    assert [(a.parent, b) for a, b in renamed] == [(target.parent, target)]
    monkeypatch.setattr(np, "savez", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        client_state.save(7, 1, {"c": np.zeros(2)})
    assert [p.name for p in target.parent.iterdir()] == ["client-1.npz"]
    monkeypatch.undo()
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    assert np.array_equal(client_state.load(7, 1)["c"], np.full(2, 2.0))
    np.savez(target, c=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        client_state.load(7, 1)


# -- the numbers of one node per client ----------------------------------------------------------------------------

KEYS = ("test_loss", "test_acc", "sampled", "participants", "failed", "fed_loss", "staleness", "clock_s")


def _records(tmp_path, cfg, name, share_nodes, workers):
    """The records' KEYS, and the N_i the nodes reported (summary.json, server-data = none), and the final x."""
    d, x = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": name}, workers=workers,
                         share_nodes=share_nodes)
    summary = read_run_json(d / "summary.json")
    reported = (summary.get("reported_sizes"), summary.get("n_train"))
    return ([[r.get(k) for k in KEYS] for r in read_rounds(d)], reported), x


@pytest.mark.parametrize("cfg", [
    # SCAFFOLD's c_i (client state), crashes and a corrupt reply (failures per client), federated evaluation
    {"strategy": "scaffold", "num-clients": 7, "clients-per-node": 3, "num-rounds": 4, "beta": 0.6,
     "crash-prob": 0.15, "corrupt-prob": 0.1, "federated-eval": True, "speed-profile": "lognormal"},
    {"strategy": "scaffnew", "num-clients": 5, "clients-per-node": 2, "num-rounds": 4, "beta": 1.0},
    # the asynchronous engine on the simulated clock: stragglers, availability, staleness per client
    {"strategy": "fedbuff", "engine": "async", "num-clients": 6, "clients-per-node": 4, "num-rounds": 6,
     "slow-clients": "1,4", "straggler-factor": 5.0, "availability": "1,0.7", "federated-eval": True},
    # the legacy API: a ClientProxy per client, its failures and federated evaluation per client
    {"strategy": "scaffold", "engine": "legacy", "num-clients": 7, "clients-per-node": 3, "num-rounds": 3,
     "beta": 0.6, "crash-prob": 0.15, "corrupt-prob": 0.1, "federated-eval": True},
    # Flower's own legacy FedAvg sampling clients of shared nodes (beta 1: its sampling is not seeded)
    {"strategy": "flwr-fedavg", "engine": "legacy", "num-clients": 5, "clients-per-node": 2, "num-rounds": 3,
     "beta": 1.0, "crash-prob": 0.2},
    {"strategy": "flwr-fedavg", "num-clients": 5, "clients-per-node": 2, "num-rounds": 3, "beta": 1.0,
     "crash-prob": 0.2, "federated-eval": True},
    # a server without data: every N_i (FedAvg's weights) as the clients of a share report them
    {"strategy": "fedavg", "num-clients": 7, "clients-per-node": 3, "num-rounds": 3, "beta": 1.0, "alpha": 0.3,
     "server-data": "none", "x0": "zeros", "federated-eval": True},
])
def test_shared_nodes_give_the_numbers_of_one_node_per_client(tmp_path, monkeypatch, cfg):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    shared, x_shared = _records(tmp_path, cfg, "shared", True, workers=2)  # two at once: one node, two clients
    alone, x_alone = _records(tmp_path, cfg, "alone", False, workers=0)
    assert shared == alone
    np.testing.assert_array_equal(x_shared, x_alone)
    state = Path(tmp_path / "home" / client_state.FOLDER)
    assert not state.exists() or not list(state.iterdir())  # the run's state files are gone with it
    assert os.environ["FLWR_HOME"] == str(tmp_path / "home")


def test_a_smaller_whole_federation_is_told_the_supernodes_its_shares_need():
    """A plain ``flwr run`` with too few SuperNodes for 1,000 clients at 10 each: the fix names 100 SuperNodes."""
    from zofl.strategies.nodes import smaller_federation

    msg = str(smaller_federation(1000, 40, 100))
    assert msg.startswith("run-config num-clients=1000 (on 100 SuperNodes, clients-per-node) but the federation has "
                          "40 SuperNodes") and '"num-supernodes=100"' in msg and "num-clients=40" not in msg
    assert str(smaller_federation(10, 2)).endswith("or set num-clients=2")  # one node per client: as before


def test_a_node_s_partition_is_the_one_it_holds_or_held_and_no_partition_for_any_other():
    from zofl.core.protocol import NO_PARTITION

    fed = Federation({})
    fed.hold(3, 21)
    fed.hold(3, 22)  # 22 took partition 3 over: 21's late replies are still partition 3's
    assert fed.partition_of(21) == fed.partition_of(22) == 3 and fed.nodes == {3: 22}
    assert fed.partition_of(99) == NO_PARTITION == -1
