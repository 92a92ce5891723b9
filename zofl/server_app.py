"""The ServerApp: validates the run-config, loads the server's data and serves the strategy."""
from __future__ import annotations

from logging import ERROR

from flwr.common import Context, log
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from .config import ConfigError
from .results import ResultsWriter, default_run_name
from .setup import prepare
from .strategies import STRATEGIES


def server_fn(context: Context) -> ServerAppComponents:
    try:
        cfg, task, spec = prepare(context.run_config)  # every error before round 1
    except ConfigError as exc:
        log(ERROR, "Invalid run-config, nothing was run: %s", exc)
        raise
    run_name = cfg.run_name or default_run_name(cfg.strategy, cfg.dataset)
    writer = ResultsWriter(f"{cfg.output_dir}/{run_name}", cfg)
    strategy = STRATEGIES[cfg.strategy].server(cfg, task, spec, writer)
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=cfg.num_rounds))


GRID_PULL_INTERVAL_S = 0.01


class ZOFLServerApp(ServerApp):
    """Flower's ServerApp, polling for client replies every 10 ms instead of Flower's 100 ms.

    In the simulation, Flower's in-memory grid sleeps ``pull_interval`` (0.1 s) between checks
    for replies, which adds up to 0.1 s to every round; benchmarks/bench_zohfl.py measures the
    effect. Nothing else changes; other grids (deployment) are left as they are.
    """

    def __call__(self, grid, context):
        if isinstance(getattr(grid, "pull_interval", None), float):
            grid.pull_interval = min(grid.pull_interval, GRID_PULL_INTERVAL_S)
        return super().__call__(grid, context)


app = ZOFLServerApp(server_fn=server_fn)
