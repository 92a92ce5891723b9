"""The methods as Flower strategies a user's own App imports, as it imports Flower's ``FedAvg``.

    from zofl.strategies import ZOHFLStrategy              # or ScaffoldStrategy, FedBuffStrategy, ...

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = ZOHFLStrategy(fraction_train=0.5, mu=1.0, eta=0.01)     # the method's Params, checked now
        result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=3)
        torch.save(result.arrays.to_torch_state_dict(), "model.pt")

and the ClientApp's ``@app.train()`` calls ``zofl.client.train(msg, context, model, trainloader)`` (``zofl.client``).

``AppStrategy`` (rounds: a ``MessageStrategy``, driven by Flower's own ``Strategy.start``) and
``AsyncAppStrategy`` (push / pull: an ``AsyncStrategy``) build, when ``start`` is called, what ``zofl run``
builds from a run-config: the settings (``app_settings``: the method's Params and the shared keys, checked by the
same ``zofl.config.parse_config``), the method's server half on a task that is only x_0 and no data
(``zofl.tasks.arrays.ModelArrays``), the federation (``nodes.learn_app_nodes``) and a ``SyncRun`` / ``AsyncRun``
whose records stay in memory (``results.MemoryWriter``) or go to ``results_dir``. Every round is then the
harness's own: S_r drawn from (seed, r) with beta = ``fraction_train``, the reply checks, the update, the
records, so that the same settings on the same data give ``zofl run``'s numbers.

Flower owns x between rounds: ``configure_train`` takes x from the ``arrays`` Flower hands it (the user's
record, flattened in its order: ``wire.flat_model``), ``aggregate_train`` gives x back in the record's names and
shapes, float64 (``wire.model_record``), and Flower's ``Result`` holds the final model. Evaluation is Flower's
FedAvg's (``fraction_evaluate`` of the nodes get the model in Flower's convention and answer with the user's own
``@app.evaluate()``), and ``evaluate_fn`` is Flower's server-side evaluation.

A bilevel method (``needs`` BILEVEL or HYPERGRAD: ``AFBOStrategy``, ``FedNestStrategy``, ...) takes its problem as
``task=``, an object of zofl's task protocol, on the server and in the ClientApps (``zofl.client.train_task``);
Flower then holds the upper variable x (``initial_arrays`` is x_0, ``tasks.arrays.WithInitialX``), the data spec is
the run-config's (``setup.data_spec``), and a phased method's rounds are each several of Flower's.

Choices (say so to a user; docs/user-app.md): the clients are the SuperNodes connected when ``start`` begins (at
least ``min_available_nodes``), numbered by their partition-id where their node configs name one; the server
holds no data (ZO-HFL's f1 is 0, N_i is each client's report); the simulated devices and injected faults of the
harness are not offered (a deployment has real ones): ``run_config`` refuses their keys.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result, Strategy

from ..config import Config, ConfigError, defaults, parse_config
from ..core.asynchronous import AsyncRun
from ..core.method import ASYNC, MODEL, Method
from ..core.protocol import ARRAYS, CONFIG
from ..core.rounds import SyncRun
from ..results import MemoryWriter, ResultsWriter
from ..settings import ENGINE_GROUPS, TaskSettings
from ..setup import NEEDS, data_spec
from ..tasks.arrays import ModelArrays, WithInitialX
from ..tasks.base import DataSpec
from .asynchronous import AsyncStrategy, GridTransport
from .deadline import DeadlineGrid
from .message import MessageStrategy
from .nodes import Federation, learn_app_nodes
from .wire import (
    APP_CLIENT_ID,
    APP_SETTINGS,
    MAX_APP_SETTINGS,
    Layout,
    app_work_content,
    flat_model,
    model_record,
)

log = logging.getLogger("zofl")

# the groups whose keys a user's App cannot set: the harness's data, task, faults, its own evaluation and x_0 (a
# user's App has its data and model on the clients, real faults, its own evaluate and initial_arrays), and the
# device model its ClientApp applies (the sleeps of zofl.client_app; a user's clients are real devices)
NOT_FOR_APPS = ("Data", "Faults", "Init", "TaskSettings", "Evaluation", "Run")
CLIENT_DEVICE = {"speed-profile", "speed-param", "slow-clients", "step-time-s"}
# the keys an App sets through the strategy's own arguments
APP_OWN = {"strategy", "engine", "num-rounds", "num-clients", "seed", "beta", "round-deadline-s", "checkpoint-every",
           "batch-size", "clock", "client-wait-s"}


UNKNOWN_M = 10**6  # num-clients while the strategy is made, before start() has learned the federation


def app_keys() -> frozenset[str]:
    """The run-config keys a user's App may set in ``run_config``: every key but the NOT_FOR_APPS groups'."""
    barred = {k.name for g in ENGINE_GROUPS if g.__name__ in NOT_FOR_APPS for k in g.keys()}
    return frozenset(defaults()) - barred - CLIENT_DEVICE - APP_OWN


def params_of(method: type[Method], params: Any, values: Mapping[str, Any]) -> Any:
    """The method's Params: ``params`` (an instance, or None for the defaults) with ``values`` (field names)."""
    cls = method.Params
    if params is None:
        params = cls()
    if not isinstance(params, cls):
        raise TypeError(f"params must be a {cls.__qualname__} ({method.title}'s parameters), got "
                        f"{type(params).__name__}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise TypeError(f"{method.title} has no parameter(s) {', '.join(unknown)}; its parameters are "
                        f"{', '.join(sorted(fields))} ({cls.__qualname__})")
    return dataclasses.replace(params, **values)


def app_settings(method: type[Method], params: Any, shared: Mapping[str, Any],
                 run_config: Mapping[str, Any]) -> Config:
    """The run's settings, checked as ``zofl run`` checks a run-config (a ConfigError names the key): the method's
    Params, the strategy's own arguments (``shared``, run-config names), and ``run_config`` (``app_keys`` only)."""
    barred = sorted(set(run_config) - app_keys())
    if barred:
        raise ConfigError(f"run_config key(s) {', '.join(map(repr, barred))} cannot be set for a user's App (the "
                          f"strategy's own arguments, or the harness's simulated data, devices and faults); the "
                          f"keys it takes are zofl's shared method keys, e.g. 'aggregation', 'min-replies', "
                          f"'tau', 'local-steps'")
    own = {k.name: getattr(params, k.field) for k in method.Params.keys()}
    twice = sorted(set(run_config) & set(own))
    if twice:  # the Params' value would silently win
        by_name = {k.name: k.field for k in method.Params.keys()}
        raise ConfigError(f"run_config key(s) {', '.join(map(repr, twice))} are {method.title}'s parameters: give "
                          f"them as keyword arguments ({', '.join(f'{by_name[k]}=...' for k in twice)})")
    return parse_config({**run_config, **own, **shared, "strategy": method.name,
                         "engine": "async" if method.kind == ASYNC else "sync"})


def settings_text(cfg: Config) -> str:
    """The settings a client needs, as the JSON a train message carries: those that differ from the defaults."""
    base = defaults()
    return json.dumps({k: v for k, v in cfg.items() if base.get(k) != v}, sort_keys=True)


class AppRun:
    """What both kinds of App strategy do in ``start``: settings, x_0, the federation, the method, the records."""

    method: ClassVar[type[Method]]

    def _init_app(self, params, values, *, seed: int, batch_size: int, fraction_train: float,
                  min_available_nodes: int, run_config: Mapping[str, Any] | None, results_dir: str | None,
                  wait_s: float, task: Any = None, **shared: Any) -> None:
        self.params = params_of(self.method, params, values)
        self.task = task
        if self.method.needs != MODEL:  # a bilevel method: the user's problem is a task of zofl's protocol
            fits, need = NEEDS[self.method.needs]
            if task is None or not fits(task):
                raise TypeError(f"{self.method.title} needs task=, {need}; got {type(task).__name__}")
        elif task is not None:
            raise TypeError(f"{self.method.title} trains the model of the ClientApps: it takes no task")
        self.shared = {"seed": seed, "batch-size": batch_size, "beta": fraction_train, "checkpoint-every": 0, **shared}
        self.run_config = dict(run_config or {})
        self.min_available_nodes, self.wait_s = min_available_nodes, wait_s
        self.results_dir = results_dir
        # checked now, as Flower's FedAvg checks its arguments when it is made; the rules that involve m (the
        # federation's size: buffer-size <= m, min-replies <= beta m) at start, when m is known
        app_settings(self.method, self.params, {**self.shared, "num-clients": UNKNOWN_M}, self.run_config)
        self.layout: Layout = ()
        self.settings_json = ""

    def _prepare(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int, extra: Mapping[str, Any]):
        """(cfg, method, writer, fed) of a run of ``num_rounds`` from ``initial_arrays`` on ``grid``'s SuperNodes."""
        x0, self.layout = flat_model(initial_arrays)
        fed, m = learn_app_nodes(grid, self.min_available_nodes, self.wait_s, initial_arrays)
        cfg = app_settings(self.method, self.params, {**self.shared, **extra, "num-rounds": num_rounds,
                                                     "num-clients": m}, self.run_config)
        self.settings_json = settings_text(cfg)
        if len(self.settings_json) > MAX_APP_SETTINGS:  # a client would refuse them: say so here, once
            raise ConfigError(f"the run's settings take {len(self.settings_json)} characters, more than the "
                              f"{MAX_APP_SETTINGS} a train message carries (a string key of several KiB?)")
        if self.task is not None:  # a bilevel method on the user's task: its x is the App's model, the rest the task's
            spec = data_spec(cfg)
            want = np.asarray(self.task.init_x(TaskSettings.of(cfg), spec)).size
            if x0.size != want:
                raise ValueError(f"initial_arrays hold {x0.size} numbers, the task's upper variable x {want}")
            method = self.method(cfg, WithInitialX(self.task, x0), spec)
            return cfg, method, self._writer(cfg), fed
        spec = DataSpec(dataset="the clients' own data", num_clients=m, seed=cfg.seed)
        method = self.method(cfg, ModelArrays(x0), spec)
        method.reported_sizes = fed.sizes
        return cfg, method, self._writer(cfg), fed

    def _writer(self, cfg: Config):
        return MemoryWriter(cfg) if self.results_dir is None else ResultsWriter(Path(self.results_dir), cfg)

    def _address(self, messages: Iterable[Message], pids: Iterable[int]) -> list[Message]:
        """Each train message in a user's form (``wire.app_work_content``: the model in the user's names) with its
        client id and the run's settings (a user's ClientApp has no run-config)."""
        out = list(messages)
        models: dict[int, ArrayRecord] = {}  # one record per distinct x (every client's, in a round)
        for msg, pid in zip(out, pids):
            arrays = msg.content.array_records[ARRAYS]
            if "x" in arrays:  # (a phase of FedRZO_bl's that sends no x keeps zofl's form)
                x = arrays["x"]
                if id(x) not in models:
                    models[id(x)] = model_record(x.numpy(), self.layout)
                app_work_content(msg.content, models[id(x)])
            rec = msg.content.config_records[CONFIG]
            rec[APP_CLIENT_ID] = int(pid)
            rec[APP_SETTINGS] = self.settings_json
        return out

    def summary(self) -> None:
        log.info("%s: %s (zofl), %s", type(self).__name__, self.method.title, self.params)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The run's round records (``zofl.core.record``), as ``zofl run`` writes them to rounds.jsonl."""
        return self.writer.records


def round_metrics(record: Mapping[str, Any]) -> MetricRecord:
    """A round record's numbers as Flower's train MetricRecord (its log and ``Result.train_metrics_clientapp``)."""
    keep = ("participants", "dropped", "failed", "rejected", "late", "steps", "f2_est", "gamma_r", "uplink_bytes")
    return MetricRecord({k: float(record[k]) for k in keep
                         if isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)})


class AppStrategy(AppRun, MessageStrategy):
    """A synchronous method as a Flower strategy for a user's App (see the module docstring). Subclasses name the
    method (``method = ZOHFL``); their ``__init__`` takes its Params and the arguments below."""

    def __init__(self, params=None, *, fraction_train: float = 1.0, fraction_evaluate: float = 1.0,
                 min_evaluate_nodes: int = 2, min_available_nodes: int = 2, seed: int = 0, batch_size: int = 32,
                 weighted_by_key: str = "num-examples", evaluate_metrics_aggr_fn: Callable | None = None,
                 run_config: Mapping[str, Any] | None = None, results_dir: str | None = None,
                 wait_s: float = 120.0, task: Any = None, **values):
        self._init_app(params, values, seed=seed, batch_size=batch_size, fraction_train=fraction_train,
                       min_available_nodes=min_available_nodes, run_config=run_config, results_dir=results_dir,
                       wait_s=wait_s, task=task)
        # Flower's own FedAvg does the evaluation half (its sampling, message convention and weighting)
        self.flower = FedAvg(fraction_evaluate=fraction_evaluate, min_evaluate_nodes=min_evaluate_nodes,
                             min_available_nodes=min_available_nodes, weighted_by_key=weighted_by_key,
                             evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn)
        self.run = self.fed = self.writer = None

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
        """Flower's ``Strategy.start``: ``num_rounds`` rounds from ``initial_arrays``, each waiting at most
        ``timeout`` seconds for its replies (the round deadline); returns Flower's ``Result``."""
        cfg, method, self.writer, fed = self._prepare(grid, initial_arrays, num_rounds,
                                                      {"round-deadline-s": float(timeout)})
        with self.writer:
            run = SyncRun(cfg, method, self.writer)
            run.set_federation(fed)
            MessageStrategy.__init__(self, run, fed)
            self.grid = DeadlineGrid(grid)
            # Flower's rounds are communication rounds: num_rounds of a phased method (FedNest, FedRZO_bl) are more
            return Strategy.start(self, self.grid, model_record(run.x, self.layout), len(run.pending_rounds()),
                                  timeout, train_config, evaluate_config, evaluate_fn)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        x, layout = flat_model(arrays)
        if [(n, s) for n, s, _ in layout] != [(n, s) for n, s, _ in self.layout]:
            raise ValueError("the arrays Flower handed configure_train are not the model start() was given")
        self.run.state = {**self.run.state, "x": x}  # Flower owns x between rounds
        messages = super().configure_train(server_round, arrays, config, grid)
        for msg in messages:  # the user's train_config, beside ours
            msg.content.config_records[CONFIG].update({k: v for k, v in config.items() if k not in ("round", "H")})
        return self._address(messages, [w.pid for w in self.plan.works])

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord, MetricRecord]:
        super().aggregate_train(server_round, replies)
        return model_record(self.run.x, self.layout), round_metrics(self.run.latest_metrics())

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.flower.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.flower.aggregate_evaluate(server_round, replies)


class AsyncAppStrategy(AppRun, AsyncStrategy):
    """An asynchronous method as a Flower strategy for a user's App: ``start`` runs ``num_rounds`` server updates
    on push / pull (``AsyncRun``), with Flower's signature and ``Result``. ``clock``: "wall" (default: replies
    are used as they come, the real asynchrony) or "simulated" (the harness's device model orders them: the
    numbers of ``zofl run`` for the same settings, whatever the real timing)."""

    def __init__(self, params=None, *, fraction_train: float = 1.0, min_available_nodes: int = 2, seed: int = 0,
                 batch_size: int = 32, clock: str = "wall", run_config: Mapping[str, Any] | None = None,
                 results_dir: str | None = None, wait_s: float = 120.0, task: Any = None, **values):
        self._init_app(params, values, seed=seed, batch_size=batch_size, fraction_train=fraction_train,
                       min_available_nodes=min_available_nodes, run_config=run_config, results_dir=results_dir,
                       wait_s=wait_s, task=task, clock=clock)
        self.writer = self.fed = None

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
        """``num_rounds`` server updates from ``initial_arrays``; ``evaluate_fn(num_rounds, arrays)`` once, on the
        final model (Flower's server-side evaluation). Returns Flower's ``Result`` (train metrics per update).
        ``timeout`` is Flower's signature's; how long a reply is waited for is run-config reply-timeout-s."""
        cfg, method, self.writer, fed = self._prepare(grid, initial_arrays, num_rounds,
                                                      {"client-wait-s": float(self.wait_s)})
        AsyncStrategy.__init__(self, cfg, method, self.writer, fed)
        result = Result()
        with self.writer:
            self.summary()
            transport = GridTransport(grid, self.nodes, address=lambda msg, pid: self._address([msg], [pid]))
            self.async_run = AsyncRun(cfg, method, self.writer, transport)
            self.async_run.set_federation(fed)
            self.async_run.run()
        for rec in self.writer.records[1:]:
            result.train_metrics_clientapp[int(rec["round"])] = round_metrics(rec)
        result.arrays = model_record(self.async_run.x, self.layout)
        if evaluate_fn is not None:
            out = evaluate_fn(num_rounds, result.arrays)
            if out is not None:
                result.evaluate_metrics_serverapp[num_rounds] = out
        return result


__all__ = ["AppStrategy", "AsyncAppStrategy", "Federation", "app_keys", "app_settings"]
