"""The ServerApp (Message API, ``@app.main()``): validate, learn the partitions, run the engine.

    engine = "sync"    MessageStrategy (flwr.serverapp.strategy.Strategy) via Strategy.start
    engine = "legacy"  LegacyStrategy (flwr.server.strategy.Strategy) via flwr.server.compat.start_grid
    engine = "async"   AsyncStrategy: push / pull on the Grid, updates as replies arrive

All three run the same Flower-free core (``zofl.core``) and the same clients; ``zofl.inprocess``
runs this very function on a Grid of its own, without Ray or a SuperLink.
"""
from __future__ import annotations

import logging
import time
from logging import ERROR
from pathlib import Path

from flwr.app import Context
from flwr.common import log as flwr_log
from flwr.serverapp import Grid, ServerApp

from .config import Config, ConfigError, clients_per_node, config_warnings
from .core import client_state
from .core.method import Method
from .core.rounds import SyncRun
from .core.run import resume_point
from .core.startup import Startup, runtime_s
from .methods import METHODS
from .results import ResultsWriter, default_run_name
from .setup import data_identity, prepare_server
from .strategies import strategy_class
from .strategies.legacy import serve_legacy
from .strategies.nodes import learn_partitions

log = logging.getLogger("zofl")
GRID_PULL_INTERVAL_S = 0.01


def make_run(run_config) -> tuple[Config, Method, ResultsWriter]:
    """Validate the run-config, open (lock) the results folder, check what a resume would continue,
    and build the method's server half; every refusal is a ``ConfigError`` raised before round 1.
    The caller closes the writer (``with writer: ...``) to release the folder's lock. The writer carries the
    run's start-up (``zofl.core.startup``) from now: this is where the ServerApp starts."""
    t0, wall0 = time.perf_counter(), time.time()
    cfg, task, spec = prepare_server(run_config)
    for warning in config_warnings(cfg):
        log.warning("%s", warning)
    run_name = cfg.run_name or default_run_name(cfg.strategy, cfg.dataset)
    method = METHODS[cfg.strategy].server(cfg, task, spec)
    try:
        writer = ResultsWriter(Path(cfg.output_dir).expanduser() / run_name, cfg, resume=cfg.resume,
                               data=data_identity(task, spec))
    except OSError as exc:  # e.g. PermissionError, a read-only file system
        raise ConfigError(f"run-config key 'output-dir': cannot write the results folder "
                          f"{Path(cfg.output_dir).expanduser() / run_name} ({exc.strerror or exc})") from exc
    writer.startup = Startup(t0, runtime_s(writer.dir, wall0))
    try:
        if cfg.resume:
            writer.resume_from = resume_point(writer, method, method.communication_rounds())
    except BaseException:
        writer.close()
        raise
    return cfg, method, writer


def serve(grid: Grid, cfg: Config, method: Method, writer: ResultsWriter):
    """Run ``method`` on ``grid`` with the configured engine; returns the final global model x."""
    # Flower's in-memory grid sleeps pull_interval (0.1 s) between checks for replies, which adds up
    # to 0.1 s to every round; 10 ms instead (benchmarks/bench_engines.py measures it). Other grids
    # (deployment) are left as they are.
    if isinstance(getattr(grid, "pull_interval", None), float):
        grid.pull_interval = min(grid.pull_interval, GRID_PULL_INTERVAL_S)
    # the server's own map: client -> node (k clients per simulated node: run-config clients-per-node)
    fed = learn_partitions(grid, cfg.num_clients, cfg.client_wait_s, clients_per_node(cfg))
    fed.refuse_changed(writer.changed_clients(fed.fingerprints))  # a resume: a node whose own data changed
    method.reported_sizes = fed.sizes  # N_i of the nodes with data of their own (live: a rejoining node's too)
    try:
        return _serve(grid, cfg, method, writer, fed)
    finally:
        if fed.k > 1:  # the clients' state files of a node serving several (zofl.core.client_state)
            client_state.remove(grid.run.run_id)


def _serve(grid: Grid, cfg: Config, method: Method, writer: ResultsWriter, fed):
    if cfg.engine == "async":
        strategy = strategy_class(cfg.engine, cfg.strategy)(cfg, method, writer, fed)
        strategy.start(grid)
        return strategy.async_run.x
    run = SyncRun(cfg, method, writer)
    run.set_federation(fed)
    if cfg.engine == "legacy":
        strategy = strategy_class(cfg.engine, cfg.strategy)(run, fed)
        serve_legacy(grid, strategy, len(run.pending_rounds()), cfg.round_deadline_s)
    else:
        strategy_class(cfg.engine, cfg.strategy)(run, fed).serve(grid)
    return run.x


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        cfg, method, writer = make_run(context.run_config)
    except ConfigError as exc:
        flwr_log(ERROR, "Invalid run-config, nothing was run: %s", exc)
        raise
    with writer:
        try:
            serve(grid, cfg, method, writer)
        except ConfigError as exc:  # e.g. fewer SuperNodes than num-clients: the fix in one line, first
            flwr_log(ERROR, "The run cannot go on: %s", exc)
            raise
