"""Issue 52: what only frozen figures caught, or nothing did.

1. float64 on the wire, both ways, on every path: the methods compute in float64 and the wire must carry their
   numbers exactly (a value such as 1 + 2**-40, which float32 rounds). The functions of ``zofl.strategies.wire``
   every engine goes through, each through Flower's own conversions and its serialization (what ``flwr run`` sends
   over gRPC): the Message API (engines sync and async, Flower's Message-API FedAvg), the legacy API's NumPyClient
   form through Flower's legacy handler (engine legacy), a user's App (its model record). Then in-process runs of
   every engine, whose arrays are compared where the server hands them to the wire and where the client gets them,
   and back.
2. The server's default run-name: a run-config without run-name writes its results to a folder of output-dir named
   ``<strategy>-<dataset>-<YYYYmmdd-HHMMSS>`` (``zofl.results.default_run_name``, ``zofl.server_app.make_run``), not
   into output-dir itself. ``zofl run`` always fills run-name, so it is tested here without it: ``run_inprocess``,
   and a plain ``flwr run`` of the App through the real Flower simulation (tests/test_flower_e2e.py, which shares
   its SuperLink with the other end-to-end runs)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.client import NumPyClient
from flwr.client.message_handler.message_handler import handle_legacy_message_from_msgtype
from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.compat.common.recorddict_compat import fitins_to_recorddict, recorddict_to_fitres

from zofl.core.protocol import Reply, Work
from zofl.core.rounds import SyncRun
from zofl.inprocess import run_inprocess
from zofl.methods import METHODS, MethodEntry
from zofl.results import RUN_FILES, read_rounds
from zofl.strategies.asynchronous import GridTransport
from zofl.strategies.wire import (
    app_work_content,
    decode_app_work,
    decode_replies,
    decode_reply,
    decode_work,
    error_kind,
    eval_messages,
    flat_model,
    model_record,
    reply_content,
    reply_from_numpy,
    reply_to_numpy,
    work_from_numpy,
    work_messages,
    work_to_numpy,
)

# values float32 cannot hold: rounded (1 + 2**-40, 1/3, ...), flushed to zero (1e-300) or overflowed (1e300)
FINE = np.array([1 + 2**-40, -(3 + 2**-45), 1 / 3, np.pi * 1e10, 1e-300, 1e300])
FINE_2D = (FINE[::-1] * (1 + 2**-33)).reshape(2, 3)
NODES = {0: 1001, 1: 1002}  # client id -> node id


def rounded_by_float32(a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(a, np.float64).astype(np.float32).astype(np.float64) != a


def test_the_values_need_float64():
    assert rounded_by_float32(FINE).all() and rounded_by_float32(FINE_2D).all()


def assert_exact(got, want, what: str = "") -> None:
    """``got`` is ``want`` bit for bit: float64, the same shape, the same bytes."""
    got = np.asarray(got)
    assert got.dtype == np.float64, f"{what}: dtype {got.dtype}, not float64"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, not {want.shape}"
    assert got.tobytes() == want.tobytes(), f"{what}: {got!r} != {want!r}"


def as_sent(msg: Message, over_grpc: bool) -> Message:
    """The message as the other side gets it: in-process (the object itself) or after Flower's serialization,
    what a SuperLink and a SuperNode send each other under ``flwr run``."""
    return message_from_proto(message_to_proto(msg)) if over_grpc else msg


def works() -> list[Work]:
    return [Work(0, 3, 2, {"x": FINE, "c": FINE_2D}, {"phase": "inner"}),
            Work(1, 3, 2, {"x": FINE, "c": -FINE_2D}, {"phase": "inner"})]


def replies() -> list[Reply]:
    return [Reply(0, {"x": FINE[::-1].copy(), "c": FINE_2D}, 7, {"steps": 2}),
            Reply(1, {"x": -FINE, "c": FINE_2D[::-1].copy()}, 9, {"steps": 2})]


# -- 1. the wire's functions, both ways, each API ------------------------------------------------------------------
@pytest.mark.parametrize("over_grpc", [False, True], ids=["in-process", "serialized"])
def test_message_api_work_and_replies_keep_float64(as_the_serverapp, over_grpc):
    """Engines sync and async and Flower's Message-API FedAvg: ``work_messages`` -> ``decode_work`` (server ->
    client, x shared by the clients' records), ``reply_content`` -> ``decode_reply`` / ``decode_replies`` (client ->
    server); federated evaluation's x (``eval_messages``)."""
    sent = work_messages(works(), NODES)
    got = [decode_work(as_sent(m, over_grpc).content, w.pid) for m, w in zip(sent, works())]
    for w, g in zip(works(), got):
        assert list(g.arrays) == list(w.arrays) and (g.round, g.H, g.config) == (w.round, w.H, w.config)
        for k, v in w.arrays.items():
            assert_exact(g.arrays[k], v, f"work {k} to client {w.pid}")
    back = [as_sent(Message(reply_content(rep), reply_to=m), over_grpc) for rep, m in zip(replies(), sent)]
    for rep, msg in zip(replies(), back):
        out = decode_reply(msg, rep.pid)
        assert isinstance(out, Reply) and out.num_examples == rep.num_examples, out
        for k, v in rep.arrays.items():
            assert_exact(out.arrays[k], v, f"reply {k} of client {rep.pid}")
    holder = {n: p for p, n in NODES.items()}
    good, bad = decode_replies(back, lambda m: holder[m.metadata.src_node_id])
    assert not bad and [r.pid for r in good] == [0, 1]
    for rep, out in zip(replies(), good):
        for k, v in rep.arrays.items():
            assert_exact(out.arrays[k], v, f"reply {k} of client {rep.pid} (decode_replies)")
    for msg in eval_messages(FINE, 4, NODES):
        assert_exact(as_sent(msg, over_grpc).content.array_records["arrays"]["x"].numpy(), FINE, "evaluate's x")


class EchoClient(NumPyClient):
    """A NumPyClient as ``zofl.client_app.ZOFLClient.fit`` is one: the NumPyClient form decoded into a Work, and a
    Reply (``reply``) encoded back; it keeps the Work it got."""

    def __init__(self, pid: int, reply: Reply, seen: list):
        self.pid, self.reply, self.seen = pid, reply, seen

    def fit(self, parameters, config):
        self.seen.append(work_from_numpy(self.pid, parameters, config))
        return reply_to_numpy(self.reply)


@pytest.mark.parametrize("over_grpc", [False, True], ids=["in-process", "serialized"])
def test_legacy_api_work_and_replies_keep_float64(as_the_serverapp, over_grpc):
    """Engine legacy: ``work_to_numpy`` in Flower's FitIns (``LegacyStrategy.configure_fit``), Flower's legacy
    handler calling ``NumPyClient.fit`` (as the ClientApp does), ``work_from_numpy``; ``reply_to_numpy`` back in
    Flower's FitRes, ``reply_from_numpy`` (``LegacyStrategy.aggregate_fit``)."""
    for work, rep in zip(works(), replies()):
        seen: list[Work] = []
        arrays, config = work_to_numpy(work)
        msg = Message(fitins_to_recorddict(FitIns(ndarrays_to_parameters(arrays), config), keep_input=True),
                      dst_node_id=NODES[work.pid], message_type="train")
        context = Context(run_id=1, node_id=NODES[work.pid], node_config={}, state=RecordDict(), run_config={})
        answer = handle_legacy_message_from_msgtype(lambda ctx: EchoClient(work.pid, rep, seen).to_client(),
                                                    as_sent(msg, over_grpc), context)
        (got,) = seen
        assert list(got.arrays) == list(work.arrays) and got.config == work.config
        for k, v in work.arrays.items():
            assert_exact(got.arrays[k], v, f"legacy work {k} to client {work.pid}")
        res = recorddict_to_fitres(as_sent(answer, over_grpc).content, keep_input=False)
        out = reply_from_numpy(work.pid, parameters_to_ndarrays(res.parameters), res.num_examples, res.metrics)
        assert list(out.arrays) == list(rep.arrays) and out.num_examples == rep.num_examples
        for k, v in rep.arrays.items():
            assert_exact(out.arrays[k], v, f"legacy reply {k} of client {work.pid}")


@pytest.mark.parametrize("over_grpc", [False, True], ids=["in-process", "serialized"])
def test_a_users_model_record_carries_x_as_float64_both_ways(as_the_serverapp, over_grpc):
    """A user's App: x in the user's names and shapes (``model_record``; a float32 model too: the methods' x is
    float64 and Flower holds it exactly) and back (``flat_model``), alone (Flower's Result, between rounds) and in a
    train message beside the method's other arrays (``app_work_content`` -> ``decode_app_work``); the reply is
    ``reply_content``'s (the Message API test)."""
    user = ArrayRecord({"fc.weight": Array(np.zeros((3, 2), np.float32)), "fc.bias": Array(np.zeros(3, np.float32))})
    layout = flat_model(user)[1]
    x = np.concatenate([FINE, FINE_2D.ravel()[:3]])
    record = model_record(x, layout)
    msg = as_sent(Message(RecordDict({"arrays": record}), dst_node_id=NODES[0], message_type="train"), over_grpc)
    back, back_layout = flat_model(msg.content.array_records["arrays"])
    assert [(n, s) for n, s, _ in back_layout] == [(n, s) for n, s, _ in layout]
    assert_exact(back, x, "x through the user's model record")
    (work,) = work_messages([Work(0, 1, 1, {"x": x, "v": FINE}, {"phase": "neumann"})], NODES)
    app_work_content(work.content, model_record(x, layout))
    got = decode_app_work(as_sent(work, over_grpc).content, 0)
    assert_exact(got.arrays["x"], x, "x in a user's train message")
    assert_exact(got.arrays["v"], FINE, "the method's other array in a user's train message")


# -- 1. every engine, in-process: the arrays where the server hands them over and where the client gets them -------
class Traffic:
    """What crossed the wire in a run, keyed (client id, round or task number): the server's arrays as it handed
    them to the wire (``SyncRun.plan``'s works, ``GridTransport.submit``) and as it got the replies
    (``SyncRun.complete``, ``GridTransport.poll``), the client's as its method got the work and gave the reply
    (``METHODS[...].client_work``, which every ClientApp calls); and the server's x before and after each round."""

    def __init__(self):
        self.sent, self.received, self.replied, self.got = {}, {}, {}, {}
        self.before, self.after = {}, {}

    @staticmethod
    def copy(arrays) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in arrays.items()}

    def install(self, monkeypatch, strategy: str) -> None:
        traffic = self
        entry = METHODS[strategy]

        def client_work(cfg, task, spec, work, state):
            traffic.received[(work.pid, work.round)] = traffic.copy(work.arrays)
            reply = entry.client_work(cfg, task, spec, work, state)
            traffic.replied[(work.pid, work.round)] = traffic.copy(reply.arrays)
            return reply

        monkeypatch.setitem(METHODS, strategy, MethodEntry(entry.server, client_work))
        plan, complete = SyncRun.plan, SyncRun.complete

        def spy_plan(run, r):
            out = plan(run, r)
            traffic.sent.update({(w.pid, w.round): traffic.copy(w.arrays) for w in out.works})
            return out

        def spy_complete(run, round_plan, replies_, failures, *args, **kwargs):
            traffic.before[round_plan.r] = np.array(run.x, copy=True)
            traffic.got.update({(rep.pid, round_plan.r): traffic.copy(rep.arrays) for rep in replies_})
            out = complete(run, round_plan, replies_, failures, *args, **kwargs)
            traffic.after[round_plan.r] = np.array(run.x, copy=True)
            return out

        monkeypatch.setattr(SyncRun, "plan", spy_plan)
        monkeypatch.setattr(SyncRun, "complete", spy_complete)
        submit, poll = GridTransport.submit, GridTransport.poll
        key_of: dict[str, tuple[int, int]] = {}

        def spy_submit(transport, work):
            mid = submit(transport, work)
            key_of[mid] = (work.pid, work.round)
            traffic.sent[key_of[mid]] = traffic.copy(work.arrays)
            return mid

        def spy_poll(transport):
            out = poll(transport)
            traffic.got.update({key_of[mid]: traffic.copy(res.arrays) for mid, res in out if isinstance(res, Reply)})
            return out

        monkeypatch.setattr(GridTransport, "submit", spy_submit)
        monkeypatch.setattr(GridTransport, "poll", spy_poll)

    def check(self) -> None:
        """Every array the client got is the server's, every reply the server got the client's, bit for bit and
        float64; x goes from one round to the next unchanged; and values float32 would round did cross both ways."""
        assert self.received and self.got, "no traffic seen"
        down_fine = up_fine = False
        # a copy: an asynchronous run's task still in flight at its end may reach its client after the run (the
        # in-process grid's thread goes on), and write here while this loop reads (seen once under load)
        for key, arrays in dict(self.received).items():
            want = self.sent.get(key)
            if want is None:  # Flower's own FedAvg plans its rounds itself: the server's x of the round is sent
                want = {"x": self.before[key[1]]}
            assert set(want) <= set(arrays), (key, list(want), list(arrays))
            for k, v in want.items():
                assert_exact(arrays[k], v, f"client {key[0]} round/task {key[1]}: {k} as the client got it")
                down_fine |= bool(rounded_by_float32(v).any())
        for key, arrays in dict(self.got).items():
            assert list(arrays) == list(self.replied[key]), key
            for k, v in self.replied[key].items():
                assert_exact(arrays[k], v, f"client {key[0]} round/task {key[1]}: reply {k} as the server got it")
                up_fine |= bool(rounded_by_float32(v).any())
        for r, x in self.after.items():  # Flower holds x between the rounds of Flower's FedAvg and of a user's App
            if r + 1 in self.before:
                assert_exact(self.before[r + 1], x, f"x from round {r} to round {r + 1}")
        assert down_fine and up_fine, "no value that needs float64 crossed the wire: the check proves nothing"


TINY = {"num-clients": 2, "num-rounds": 2, "beta": 1.0, "local-steps": 2, "checkpoint-every": 0}
ENGINES = {
    "sync": {"strategy": "fedavg", "engine": "sync"},
    "legacy": {"strategy": "fedavg", "engine": "legacy"},
    "flwr-fedavg-message-api": {"strategy": "flwr-fedavg", "engine": "sync"},
    "flwr-fedavg-legacy-api": {"strategy": "flwr-fedavg", "engine": "legacy"},
    "async": {"strategy": "fedbuff", "engine": "async", "buffer-size": 1, "num-rounds": 4},
    "sync-scaffold": {"strategy": "scaffold", "engine": "sync"},  # a second array each way (the control variates)
}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_engine_carries_float64_exactly_both_ways_in_process(monkeypatch, tmp_path, engine):
    rc = {**TINY, **ENGINES[engine], "output-dir": str(tmp_path), "run-name": engine}
    traffic = Traffic()
    traffic.install(monkeypatch, rc["strategy"])
    _, x = run_inprocess(rc, workers=0)
    traffic.check()
    assert x.dtype == np.float64
    if rc["engine"] != "async":
        assert_exact(x, traffic.after[max(traffic.after)], "the run's final model")


@pytest.mark.parametrize("name", ["FedAvgStrategy", "FedBuffStrategy"])
def test_a_users_app_carries_float64_exactly_both_ways(monkeypatch, name):
    """A user's App (tests/user_app/plain_client: a torch model, zofl.client.train) with a zofl strategy, sync and
    async: the same comparison, the model going out in the user's record and x coming back as Flower's Result."""
    pytest.importorskip("torch")
    import zofl.strategies as strategies
    from zofl.inprocess import InProcessGrid

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "user_app"))
    cls = getattr(strategies, name)
    traffic = Traffic()
    traffic.install(monkeypatch, cls.method.name)
    grid = InProcessGrid({}, 2, workers=0, client_app="plain_client:app")
    try:
        extra = {"buffer-size": 1} if cls is strategies.FedBuffStrategy else {}
        strategy = cls(run_config={"local-steps": 2, **extra}, min_available_nodes=2,
                       **({"clock": "simulated"} if cls is strategies.FedBuffStrategy else {}))
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": Array(np.zeros((2, 3), np.float32))}),
                                num_rounds=3)
    finally:
        grid.close()
    traffic.check()
    x = strategy.run.x if cls is strategies.FedAvgStrategy else strategy.async_run.x
    assert_exact(flat_model(result.arrays)[0], x, "Flower's Result: the final model")


# -- 2. the server's default run-name --------------------------------------------------------------------------------
DEFAULT_NAME = re.compile(r"(?P<strategy>[a-z0-9-]+)-(?P<dataset>digits)-(?P<stamp>\d{8}-\d{6})")


def assert_in_default_folder(output_dir: Path, strategy: str, t0: float, t1: float) -> Path:
    """The run's results are in one folder of ``output_dir`` named <strategy>-<dataset>-<YYYYmmdd-HHMMSS> (the
    start's local time, between t0 and t1), none of them in ``output_dir`` itself. Returns the folder."""
    entries = sorted(output_dir.iterdir())
    strays = [p.name for p in entries if p.name in RUN_FILES or p.is_file()]
    assert not strays, f"results written straight into output-dir: {strays}"
    assert len(entries) == 1 and entries[0].is_dir(), entries
    folder = entries[0]
    m = DEFAULT_NAME.fullmatch(folder.name)
    assert m and m["strategy"] == strategy, f"{folder.name!r} is not {strategy}-digits-YYYYmmdd-HHMMSS"
    stamp = m["stamp"]
    assert time.strftime("%Y%m%d-%H%M%S", time.localtime(int(t0))) <= stamp \
        <= time.strftime("%Y%m%d-%H%M%S", time.localtime(int(t1) + 1)), (stamp, t0, t1)
    assert (folder / "summary.json").is_file() and read_rounds(folder), sorted(p.name for p in folder.iterdir())
    return folder


def test_a_run_without_run_name_writes_to_its_default_folder_in_process(tmp_path):
    out = tmp_path / "out"
    t0 = time.time()
    d, _ = run_inprocess({"num-clients": 2, "num-rounds": 1, "output-dir": str(out)}, workers=0)
    folder = assert_in_default_folder(out, "zohfl", t0, time.time())
    assert d == folder


def test_an_evaluate_message_names_its_round_and_client_and_goes_to_that_clients_node(as_the_serverapp):
    """``eval_messages``: per held client, in client order, an ``evaluate`` message to its node whose config names
    the round evaluated and the client (``client_of_message``), x in Flower's "arrays"."""
    from zofl.strategies.wire import client_of_message

    sent = eval_messages(FINE, 4, {1: 1002, 0: 1001})
    assert [m.metadata.dst_node_id for m in sent] == [1001, 1002]
    assert all(m.metadata.message_type == "evaluate" for m in sent)
    assert [dict(m.content["config"]) for m in sent] == [{"round": 4, "zofl.client-id": 0},
                                                         {"round": 4, "zofl.client-id": 1}]
    assert [client_of_message(m) for m in sent] == [0, 1]
    assert all(np.array_equal(m.content["arrays"]["x"].numpy(), FINE) for m in sent)


def test_a_flower_error_reply_s_kind_is_read_from_its_code_or_from_flower_s_reason_alone():
    """Flower's own reasons (the legacy API passes only the reason on, code None): a message that expired is
    "late", a node without heartbeats "lost", a ClientApp's exception "error"; the code alone decides as well."""
    from flwr.common.constant import ErrorCode
    from flwr.server.superlink.linkstate.utils import MESSAGE_UNAVAILABLE_ERROR_REASON, NODE_UNAVAILABLE_ERROR_REASON

    assert error_kind(None, MESSAGE_UNAVAILABLE_ERROR_REASON) == "late"
    assert error_kind(None, "Message TTL has expired") == "late"
    assert error_kind(None, NODE_UNAVAILABLE_ERROR_REASON) == "lost"
    assert error_kind(ErrorCode.MESSAGE_UNAVAILABLE, "") == "late"
    assert error_kind(ErrorCode.NODE_UNAVAILABLE, "") == "lost"
    assert error_kind(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, "ValueError:<'bad'>") == "error"


def test_numpy_replies_and_work_decode_by_name_positionally_or_refuse_by_name():
    """NumPyClient replies: the arrays by the names they carry, positionally ("#0", ...) when those are missing or
    do not match, the client id the reply carries left out of its metrics (the server knows whom it asked); work
    without names is one array ``x`` (Flower's own strategies), no array with no names is empty work, and anything
    else is refused naming the client."""
    reply = Reply(4, {"G": np.ones(2), "c": np.zeros(3)}, 7, {"steps": 3})
    arrays, n, metrics = reply_to_numpy(reply)
    assert metrics["pid"] == 4 and reply_from_numpy(4, arrays, n, metrics) == reply
    unnamed = reply_from_numpy(4, [np.ones(2)], 7, {"steps": 3, "pid": 4})
    assert list(unnamed.arrays) == ["#0"] and unnamed.metrics == {"steps": 3}
    assert list(reply_from_numpy(4, arrays, n, {**metrics, "arrays": "G"}).arrays) == ["#0", "#1"]
    assert work_from_numpy(3, [], {"round": 1, "H": 2}).arrays == {}
    assert list(work_from_numpy(3, [np.ones(2)], {"round": 1, "H": 2}).arrays) == ["x"]
    with pytest.raises(ValueError, match=r"^work for client 3: 2 arrays but names \[\]$"):
        work_from_numpy(3, [np.ones(2), np.ones(2)], {"round": 1, "H": 2})
    for config in ({"round": 1}, {"H": 2}):
        with pytest.raises(ValueError, match=r"^work for client 3: config \{.*\} lacks 'round' or 'H'$"):
            work_from_numpy(3, [np.ones(2)], config)


def test_the_legacy_strategy_gives_flower_the_round_s_recorded_test_loss_and_other_figures():
    """LegacyStrategy.evaluate (Flower's centralised evaluation): the record's test loss, and its other figures as
    metrics; nothing when the record has no test loss."""
    from types import SimpleNamespace

    from zofl.strategies.legacy import LegacyStrategy

    def evaluate(latest):
        run = SimpleNamespace(latest_metrics=lambda: latest)
        return LegacyStrategy(run, SimpleNamespace(nodes={})).evaluate(3, None)

    assert evaluate({"test_loss": 1.25, "test_acc": 0.5, "round": 3}) == (1.25, {"test_acc": 0.5})
    assert evaluate({"test_acc": 0.5}) is None and evaluate({"test_loss": None}) is None


def test_the_legacy_strategy_s_federated_evaluation_sends_x_and_its_round_to_each_connected_client():
    """LegacyStrategy.configure_evaluate: x_r in Flower's EvaluateIns with the round it evaluates (the config every
    evaluate message carries, as the Message API's), to each held client whose SuperNode is connected; none in a
    round without federated evaluation."""
    from types import SimpleNamespace

    from zofl.strategies.legacy import LegacyStrategy

    run = SimpleNamespace(deferred=(4, None), x=np.arange(3.0))
    node = SimpleNamespace(node_id=11, grid=None, run_id=1)  # what Flower's client manager holds (GridClientProxy)
    strategy, manager = LegacyStrategy(run, SimpleNamespace(nodes={0: 11, 1: 12})), SimpleNamespace(all=lambda: {
        "11": node})
    [(_, ins)] = strategy.configure_evaluate(4, None, manager)
    assert ins.config == {"round": 4} and np.array_equal(parameters_to_ndarrays(ins.parameters)[0], run.x)
    run.deferred = None
    assert strategy.configure_evaluate(5, None, manager) == []
