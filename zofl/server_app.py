"""The ServerApp: validates the run-config, loads the server's data and serves the strategy."""
from __future__ import annotations

from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from .results import ResultsWriter, default_run_name
from .setup import prepare
from .strategies import STRATEGIES


def server_fn(context: Context) -> ServerAppComponents:
    cfg, task, spec = prepare(context.run_config)  # every error before round 1
    run_name = cfg.run_name or default_run_name(cfg.strategy, cfg.dataset)
    writer = ResultsWriter(f"{cfg.output_dir}/{run_name}", cfg)
    strategy = STRATEGIES[cfg.strategy].server(cfg, task, spec, writer)
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=cfg.num_rounds))


app = ServerApp(server_fn=server_fn)
