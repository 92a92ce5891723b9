"""The ServerApp: validates the run-config, loads the server's data and serves the strategy."""
from __future__ import annotations

from logging import ERROR
from pathlib import Path

from flwr.common import Context, log
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import Strategy

from .config import Config, ConfigError
from .results import ResultsWriter, default_run_name
from .setup import prepare
from .strategies import STRATEGIES


def make_strategy(run_config) -> tuple[Config, Strategy]:
    """Validate the run-config, open the results folder and build the configured strategy."""
    cfg, task, spec = prepare(run_config)  # every error before round 1
    run_name = cfg.run_name or default_run_name(cfg.strategy, cfg.dataset)
    try:
        writer = ResultsWriter(Path(cfg.output_dir).expanduser() / run_name, cfg, resume=cfg.resume)
    except FileExistsError as exc:
        raise ConfigError(f"run-config key 'run-name': {exc}") from exc
    return cfg, STRATEGIES[cfg.strategy].server(cfg, task, spec, writer)


def server_fn(context: Context) -> ServerAppComponents:
    try:
        cfg, strategy = make_strategy(context.run_config)
    except ConfigError as exc:
        log(ERROR, "Invalid run-config, nothing was run: %s", exc)
        raise
    deadline = cfg.round_deadline_s or None  # clients that miss it are failures of the round
    return ServerAppComponents(strategy=strategy,
                               config=ServerConfig(num_rounds=strategy.rounds_to_run(), round_timeout=deadline))


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
