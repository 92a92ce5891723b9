"""The client half for a user's ClientApp (zofl.client): what its train message must carry, and the data it reads
in every form the module docstring lists."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402

SETTINGS = json.dumps({"strategy": "fedavg", "local-steps": 1})


def _work(x: np.ndarray, **config) -> Message:
    """A zofl strategy's train message for client 0 of a model of x's size (``config`` replaces its entries)."""
    entries = {"round": 0, "H": 1, "zofl.client-id": 0, "zofl.settings": SETTINGS, **config}
    rec = RecordDict({"arrays": ArrayRecord({"w": Array(x)}), "zofl.arrays": ArrayRecord(),
                      "config": ConfigRecord({k: v for k, v in entries.items() if v is not None})})
    return Message(rec, dst_node_id=1, message_type="train")


def _context() -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def test_a_train_message_without_a_client_id_of_zofl_is_refused_naming_the_entry(as_the_serverapp):
    """No client id, a negative one, a bool or a text: the message is no zofl strategy's, refused as such (a
    ValueError naming the config entry), never taken for client 0 or read further."""
    from zofl.client import train as zofl_train

    data = (np.zeros((4, 3), np.float32), np.array([0, 1, 0, 1]))
    lin = torch.nn.Linear(3, 2)
    for pid in (None, -1, True, "0"):
        with pytest.raises(ValueError, match=re.escape("the train message gives no client id (zofl.client-id): is "
                                                       "the server a zofl strategy?")):
            zofl_train(_work(np.zeros(8), **{"zofl.client-id": pid}), _context(), lin, data)
    assert zofl_train(_work(np.zeros(8)), _context(), lin, data).content["metrics"]["num-examples"] == 4


def test_gather_reads_a_tuple_of_batches_as_batches():
    """A tuple is a pair (inputs, labels) only when both have a shape: a tuple of two or three batches is an iterable
    of batches like any other."""
    from zofl.client import gather

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 0, 1, 2])
    for batches in (((x[:3], y[:3]), (x[3:], y[3:])), ((x[:2], y[:2]), (x[2:4], y[2:4]), (x[4:], y[4:]))):
        gx, gy = gather(batches, ("img", "label"))
        assert np.array_equal(gx, x) and np.array_equal(gy, y) and gy.dtype == np.int64


def test_train_reads_mapping_batches_by_the_keys_it_is_given(as_the_serverapp):
    """``batch_keys`` names the inputs and labels of batches that are mappings (here "image" and "target"): the
    reply counts every example, as the same data given as a pair of arrays."""
    from zofl.client import train as zofl_train

    x = np.arange(18, dtype=np.float32).reshape(6, 3) / 10
    y = np.array([0, 1, 0, 1, 1, 0])
    batches = [{"image": torch.tensor(x[:4]), "target": torch.tensor(y[:4])},
               {"image": torch.tensor(x[4:]), "target": torch.tensor(y[4:])}]
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    reply = zofl_train(_work(np.zeros(8)), _context(), lin, batches, batch_keys=("image", "target"))
    pair = zofl_train(_work(np.zeros(8)), _context(), lin, (x, y))
    assert reply.content["metrics"]["num-examples"] == 6
    assert np.array_equal(reply.content["arrays"]["x"].numpy(), pair.content["arrays"]["x"].numpy())


def test_gather_reads_a_shuffling_datapipe_s_loader_in_its_data_s_order():
    """A DataLoader over a DataPipe with a shuffle step, made with shuffle=True: gather turns the pipe's shuffling
    off (as a sampler's is not used), so the data come in their own order, the same at every message."""
    from torch.utils.data import DataLoader
    from torch.utils.data.datapipes.iter import IterableWrapper

    from zofl.client import gather

    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20) % 3
    pipe = IterableWrapper([(torch.tensor(a), torch.tensor(b)) for a, b in zip(x, y)]).shuffle()
    loader = DataLoader(pipe, batch_size=4, shuffle=True)
    for _ in range(2):
        gx, gy = gather(loader, ("img", "label"))
        assert np.array_equal(gx, x) and np.array_equal(gy, y)


def test_train_task_refuses_a_message_without_a_config_record_as_no_zofl_strategys(as_the_serverapp):
    """A bilevel ClientApp (``train_task``) sent Flower's plain message (arrays, no config record): refused in
    train's words, not an AttributeError from reading a record that is not there."""
    from zofl.client import train_task

    plain = Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(3))})}), dst_node_id=1,
                    message_type="train")
    with pytest.raises(ValueError, match=re.escape("the train message's zofl.settings is not the JSON")):
        train_task(plain, _context(), task=None)


def test_train_task_keeps_a_bilevel_methods_client_state_between_messages(as_the_serverapp, monkeypatch):
    """A bilevel method of a user's own (``methods.register``) may keep arrays on its clients, as SCAFFOLD does in
    the model path: train_task hands client_work the state its node's Context holds and keeps what it leaves
    there for the next message (the built-in bilevel methods keep none, so only such a method shows it)."""
    from zofl.client import train_task
    from zofl.core.protocol import Reply
    from zofl.methods import METHODS, MethodEntry

    seen = []

    def client_work(cfg, task, spec, work, state):
        seen.append(dict(state))
        state["visits"] = np.array([len(seen)], dtype=np.int64)
        return Reply(work.pid, {"x": work.arrays["x"]}, 1)

    monkeypatch.setitem(METHODS, "fednest", MethodEntry(METHODS["fednest"].server, client_work))
    ctx, settings = _context(), json.dumps({"strategy": "fednest", "task": "toy"})
    for _ in range(3):
        reply = train_task(_work(np.zeros(3), **{"zofl.settings": settings}), ctx, task=None)
        assert reply.content["arrays"]["x"].numpy().shape == (3,)
    assert [s.get("visits", np.array([0]))[0] for s in seen] == [0, 1, 2]
