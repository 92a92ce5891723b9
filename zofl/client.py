"""The client half of zofl's methods for a user's own ClientApp: one call in its ``@app.train()``.

    from zofl.client import train as zofl_train

    @app.train()
    def train(msg: Message, context: Context):
        model = Net()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())   # as with Flower's FedAvg
        trainloader, _ = load_data(context.node_config["partition-id"], context.node_config["num-partitions"])
        return zofl_train(msg, context, model, trainloader)                  # instead of train(...) and the reply

``train`` runs, on any ``torch.nn.Module`` and its loss, the client work of the method the server's strategy
(``zofl.strategies``: ``ZOHFLStrategy``, ``ScaffoldStrategy``, ``FedBuffStrategy``, ...) names in the message,
the same function ``zofl run``'s clients run (``zofl.methods.<name>.client_work``), and returns the reply message.
The work message is in Flower's convention ("arrays" is the model, in the names of the strategy's
``initial_arrays``), so the ClientApp may load it as it does for Flower's FedAvg; x is read from the message, not
from ``model``. The model is the flat vector of its parameters (``named_parameters()`` order, the order of
``ArrayRecord(model.state_dict())`` for a model without buffers; ``ModelTask``); a stateful method's client state
(SCAFFOLD's c_i, Scaffnew's h_i) stays in the node's ``Context``.

Choices (docs/user-app.md): zofl draws each local step's minibatch itself, seeded by (seed, round, client), as the
papers' analyses assume and as ``zofl run`` does, so the client's data are read once per message into memory in
a fixed order: a torch ``DataLoader`` is read in its dataset's order (its sampler's shuffling is not used; its
``collate_fn`` is), any other iterable of batches as it comes; a batch is a pair (inputs, labels) or a mapping with
the keys ``batch_keys`` (Flower's tutorial: "img", "label"). The model is used in eval mode (a zeroth-order
estimate needs the same loss at the same point: no dropout draws) and must hold no buffers (BatchNorm statistics
are no part of x; refused, naming them).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from .client_app import load_state, save_state
from .config import Config, parse_config
from .core.protocol import (
    CONFIG,
    DATA_ERROR,
    DATA_FINGERPRINT,
    METRICS,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    PARTITION_ID,
    Work,
)
from .extras import require
from .methods import METHODS
from .safeio import load_json
from .setup import data_spec
from .strategies.wire import (
    APP_CLIENT_ID,
    APP_QUERY,
    APP_SETTINGS,
    MAX_APP_SETTINGS,
    decode_app_work,
    reply_content,
)
from .tasks.base import DataSpec
from .tasks.data import ArrayData, array_fingerprint
from .tasks.torch_task import TorchTask


def train(msg: Message, context: Context, model, data: Iterable, loss_fn: Callable | None = None,
          batch_keys: tuple[str, str] = ("img", "label")) -> Message:
    """The reply to ``msg`` (a train message of a zofl strategy): the method's client work on ``model`` (a
    ``torch.nn.Module``, its loss ``loss_fn(logits, labels)``, default cross-entropy) and ``data`` (a DataLoader,
    an iterable of batches, or a pair (inputs, labels) of arrays). See the module docstring."""
    config = msg.content.config_records.get(CONFIG, ConfigRecord())
    x, y = gather(data, batch_keys)
    if config.get(APP_QUERY) == "partition":
        return Message(identity(context, x, y), reply_to=msg)
    cfg, work = _work(msg, config)
    task = ModelTask(model, loss_fn, x, y)
    if work.arrays["x"].shape != (task.size,):
        raise ValueError(f"the server's model has {work.arrays['x'].size} parameters, this ClientApp's "
                         f"{task.size}: the strategy's initial_arrays must be this model's")
    state = load_state(context)
    reply = METHODS[cfg.strategy].client_work(cfg, task, DataSpec(num_clients=cfg.num_clients, seed=cfg.seed), work,
                                              state)
    save_state(context, state)
    return Message(reply_content(reply), reply_to=msg)


def train_task(msg: Message, context: Context, task) -> Message:
    """The reply to a train message of a bilevel method's strategy (``AFBOStrategy``, ``FedNestStrategy``, ...): its
    client work on ``task``, an object of zofl's bilevel protocol (``zofl.tasks.bilevel.BilevelTask``, or the
    hypergradient tasks' ``zofl.tasks.hypergrad``) holding this node's problem (its ``client_problem`` /
    ``client_oracles`` for its client id). The message's "arrays" is the upper variable x as the strategy's
    initial_arrays named it; the lower variable and the method's other arrays travel beside it."""
    config = msg.content.config_records.get(CONFIG, ConfigRecord())
    if config.get(APP_QUERY) == "partition":  # a task's data are its own business: no N_i reported
        return Message(RecordDict({METRICS: node_claim(context)}), reply_to=msg)
    cfg, work = _work(msg, config)
    state = load_state(context)
    reply = METHODS[cfg.strategy].client_work(cfg, task, data_spec(cfg), work, state)
    save_state(context, state)
    return Message(reply_content(reply), reply_to=msg)


def _work(msg: Message, config) -> tuple[Config, Work]:
    """The run's settings and the Work a zofl strategy's train message carries (checked)."""
    cfg = settings(config.get(APP_SETTINGS))
    pid = config.get(APP_CLIENT_ID)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise ValueError(f"the train message gives no client id ({APP_CLIENT_ID}): is the server a zofl strategy?")
    work = decode_app_work(msg.content, pid)
    for key in (APP_CLIENT_ID, APP_SETTINGS):
        work.config.pop(key, None)
    return cfg, work


@functools.lru_cache(maxsize=8)
def settings(text: Any) -> Config:
    """The run's settings from a train message (``zofl.strategies.app.settings_text``), checked as a run-config."""
    if not isinstance(text, str) or len(text) > MAX_APP_SETTINGS:
        raise ValueError(f"the train message's {APP_SETTINGS} is not the JSON of at most {MAX_APP_SETTINGS} "
                         f"characters a zofl strategy sends")
    values = load_json(text, APP_SETTINGS)
    if not isinstance(values, dict):
        raise ValueError(f"the train message's {APP_SETTINGS} is not a JSON object")
    return parse_config(values)


def identity(context: Context, x: np.ndarray, y: np.ndarray) -> RecordDict:
    """The answer to the server's question who this node is (``strategies.nodes.learn_app_nodes``): its node
    config's partition-id and num-partitions (-1 and 0 without them), its N_i and its data's fingerprint."""
    own = ConfigRecord({NUM_EXAMPLES: int(len(y)), DATA_FINGERPRINT: array_fingerprint(x, y)}) if len(y) \
        else ConfigRecord({DATA_ERROR: "this ClientApp's data hold no training example"})
    return RecordDict({METRICS: node_claim(context), CONFIG: own})


def node_claim(context: Context) -> MetricRecord:
    """The partition-id and num-partitions of this node's config, -1 and 0 when it names none (the server then
    numbers the nodes itself: ``strategies.nodes.learn_app_nodes``)."""
    node = context.node_config
    has = PARTITION_ID in node and NUM_PARTITIONS in node
    return MetricRecord({PARTITION_ID: int(node[PARTITION_ID]) if has else -1,
                         NUM_PARTITIONS: int(node[NUM_PARTITIONS]) if has else 0})


def _numpy(v) -> np.ndarray:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def gather(data: Iterable, batch_keys: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) of all of ``data`` in a fixed order (see the module docstring), labels as int64."""
    torch = require("torch", "zofl.client.train")
    if isinstance(data, tuple) and len(data) == 2 and all(hasattr(d, "shape") for d in data):
        x, y = _numpy(data[0]), _numpy(data[1])
    else:
        single = False  # a DataLoader of single samples (batch_size=None): each item is one input and its label
        if isinstance(data, torch.utils.data.DataLoader):  # its dataset in order, through its own collate_fn
            single = data.batch_size is None
            data = torch.utils.data.DataLoader(data.dataset, batch_size=data.batch_size, shuffle=False,
                                               collate_fn=data.collate_fn)
        xs, ys = [], []
        for batch in data:
            bx, by = (batch[batch_keys[0]], batch[batch_keys[1]]) if isinstance(batch, dict) else batch
            bx, by = _numpy(bx), _numpy(by)
            xs.append(bx[None] if single else bx)
            ys.append(by[None] if single else by)
        if not xs:
            return np.zeros((0, 1), np.float32), np.zeros(0, np.int64)
        x, y = np.concatenate(xs), np.concatenate(ys)
    if len(x) != len(y) or y.ndim != 1 or y.dtype.kind not in "iu":
        raise ValueError(f"zofl.client.train: the data give {len(x)} inputs and labels of shape {y.shape}, dtype "
                         f"{y.dtype}: one integer label per input is needed")
    return np.ascontiguousarray(x), y.astype(np.int64)


class ModelTask(TorchTask):
    """A user's ``torch.nn.Module`` (and loss) and a client's data as zofl's Task: the flat vector of its parameters
    in ``named_parameters()`` order, gradients by ``torch.func`` in the model's own dtype and device."""

    def __init__(self, model, loss_fn: Callable | None, x: np.ndarray, y: np.ndarray):
        require("torch", "zofl.client.train")
        params = dict(model.named_parameters())
        buffers = [k for k in model.state_dict() if k not in params]
        if buffers:
            raise ValueError(f"zofl.client.train: the model holds buffers {buffers[:5]} (e.g. BatchNorm statistics), "
                             f"which are no part of the methods' x: use a model without them (e.g. GroupNorm)")
        if not params:
            raise ValueError("zofl.client.train: the model has no parameters: there is nothing to train")
        first = next(iter(params.values()))
        super().__init__(lambda *_: model, loss_fn, dtype=str(first.dtype).replace("torch.", ""), num_threads=None)
        self.device = first.device.type
        self._module = model.eval()
        self._shapes = [(name, tuple(p.shape)) for name, p in params.items()]
        self.size = int(sum(p.numel() for p in params.values()))
        self.data = ArrayData(x, y, int(y.max()) + 1 if len(y) else 1)

    def client_data(self, spec, pid: int) -> ArrayData:
        return self.data
