"""The ClientApp: one NumPyClient that runs the configured strategy's client work on its partition."""
from __future__ import annotations

from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from .config import ConfigError
from .setup import prepare
from .strategies import STRATEGIES


class ZOFLClient(NumPyClient):
    """Thin adapter: Flower in, ``STRATEGIES[strategy].client_fit`` (pure numpy) out."""

    def __init__(self, context: Context):
        self.cfg, self.task, self.spec = prepare(context.run_config)
        node = context.node_config
        self.pid = int(node.get("partition-id", 0))
        num_partitions = int(node.get("num-partitions", self.cfg.num_clients))
        if num_partitions != self.cfg.num_clients or not 0 <= self.pid < num_partitions:
            raise ConfigError(f"this SuperNode has partition-id={self.pid}, num-partitions={num_partitions}, but "
                              f"run-config num-clients={self.cfg.num_clients}: they must agree")
        self.fit_fn = STRATEGIES[self.cfg.strategy].client_fit

    def fit(self, parameters, config):
        return self.fit_fn(self.cfg, self.task, self.spec, self.pid, parameters, config)


def client_fn(context: Context):
    return ZOFLClient(context).to_client()


app = ClientApp(client_fn=client_fn)
