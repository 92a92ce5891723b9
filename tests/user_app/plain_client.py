"""A ClientApp whose nodes name no partition (deployed SuperNodes without partition-id): tests/test_user_app.py."""
import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from zofl.client import train as zofl_train

app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    rng = np.random.default_rng(context.node_id % 1000)  # this node's own data
    x, y = rng.normal(size=(20, 3)).astype(np.float32), rng.integers(0, 2, size=20)
    torch.manual_seed(0)
    return zofl_train(msg, context, torch.nn.Linear(3, 2, bias=False), (x, y))
