"""Every run-config key, declared once, as a field of a typed settings group.

A group is a frozen dataclass whose fields are run-config keys: ``key(default, allowed, doc, source,
check)`` gives each field its default, the rule shown in errors, its documentation and where the
default comes from ("paper" = the ZO-HFL paper's experiments, "ours" = a choice the papers leave
open, "run" = describes the run). The flat key is the field's name with '_' -> '-' (``num_clients``
is ``num-clients``; ``lambda_`` is ``lambda``), so run-configs, grid files and stored runs keep their
keys. ``Group.of(cfg)`` is a group's typed values from a validated run-config (``zofl.config``).

The groups every run has are here (``ENGINE_GROUPS``: run, data, clients, faults, robust, policy,
local steps, clock, x_0, task), and so are the small groups several methods share (smoothing, the
bilevel steps). A method's own parameters are a class in its module (e.g. ``ZOHFLParams`` in
``zofl.methods.zohfl``), its ``Method.Params``; ``zofl.config.keys()`` lists every key, the engine
groups' first, then each registered method's, and refuses a key declared twice.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .algorithms.server_opt import OPTIMIZERS

ENGINES = ("sync", "legacy", "async")
MAX_ROUNDS = 100_000  # a bound that stops typos (1e9 rounds) before they start
INT64_MAX = 2**63 - 1  # Flower's run-config carries integers as sint64 (flwr.common.serde): 2**63 fails in flwr run
MAX_STR = 4096  # longer strings are no path, task or list anyone means (and near Linux's 128 KiB argument limit)
MAX_RUN_NAME = 200  # run-name: one folder's name, well under the 255 bytes file systems allow
# the smallest availability: a client with probability p sits out (1 - p) / p tasks on average, each costing the
# asynchronous engine a draw and an event; p = 0 never ends, p = 1e-6 spins a million events per task. At 0.01 a
# task costs at most ~100 events, and a streak of 5000 misses has probability 0.99**5000 < 1e-21.
MIN_AVAILABILITY = 0.01
DATASETS = ("digits", "covtype", "mnist", "fashion_mnist", "cifar10")  # = zofl.tasks.data.DATASETS (tested)
# the simulation's split schemes (zofl.tasks.sources.partition reads this tuple)
SPLIT_FALLBACKS = ("top-up", "fail")  # what follows a Dirichlet draw that cannot meet min-partition-size
PARTITIONERS = ("iid", "dirichlet", "pathological", "shards", "natural", "grouped-natural")
TYPES = {"str": str, "int": int, "float": float, "bool": bool}


class ConfigError(ValueError):
    """A run-config value is not allowed; the message names the key and the allowed values."""


@dataclass(frozen=True)
class Key:
    """One run-config key, as ``zofl.config`` checks it and ``zofl keys`` documents it."""

    name: str
    type: type
    default: Any
    allowed: str  # human-readable rule, shown in errors
    doc: str
    source: str = "ours"  # "paper", "ours" or "run"
    check: Callable[[Any], bool] = lambda v: True
    group: str = ""  # the settings class that declares it
    field: str = ""  # its field name there
    example: Any = None  # a valid value other than the default, where none can be read off ``allowed`` (tests)


def key(default: Any, allowed: str, doc: str, source: str, check: Callable[[Any], bool] | None = None,
        name: str | None = None, example: Any = None) -> Any:
    """A settings field that is a run-config key (``name``: the flat key when it is not the field's name
    with '_' -> '-'; ``example``: a valid other value, for a key whose ``allowed`` names none)."""
    return dataclasses.field(default=default, metadata={
        "allowed": allowed, "doc": doc, "source": source, "check": check or (lambda v: True), "name": name,
        "example": example})


class Settings:
    """Base of the settings groups (each a frozen dataclass of ``key`` fields)."""

    @classmethod
    def keys(cls) -> tuple[Key, ...]:
        return _keys(cls)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(k.name for k in _keys(cls))

    @classmethod
    def of(cls, cfg: Mapping[str, Any]):
        """This group's typed values from a validated run-config (every key present)."""
        return cls(**{k.field: cfg[k.name] for k in _keys(cls)})


@functools.cache
def _keys(cls: type) -> tuple[Key, ...]:
    out = []
    mro = cls.__mro__  # the keys in reading order: the bases' (as listed) before the class's own
    fields = sorted(dataclasses.fields(cls), key=lambda f: _rank(mro, f.name))
    for f in fields:
        owners = [c for c in reversed(mro) if f.name in c.__dict__.get("__annotations__", {})]
        if len(owners) > 1:
            raise ValueError(f"run-config key {f.name.replace('_', '-')!r} is declared twice: in "
                             f"{owners[0].__qualname__} and in {owners[1].__qualname__} (declare it once)")
        owner = owners[0]
        m = f.metadata
        typ = f.type if isinstance(f.type, type) else TYPES[f.type]  # a string under postponed annotations
        out.append(Key(m["name"] or f.name.replace("_", "-"), typ, f.default, m["allowed"], m["doc"], m["source"],
                       m["check"], owner.__qualname__, f.name, m["example"]))
    return tuple(out)


def _rank(mro: tuple[type, ...], name: str) -> int:
    owner = next(i for i in reversed(range(len(mro))) if name in mro[i].__dict__.get("__annotations__", {}))
    return len(mro) if owner == 0 else owner


def positive(v) -> bool:
    return v > 0 and math.isfinite(v)


def nonnegative(v) -> bool:
    return v >= 0 and math.isfinite(v)


def floats(text: str, ok: Callable[[float], bool]) -> bool:
    try:
        values = [float(t) for t in text.split(",")]
    except ValueError:
        return False
    return bool(values) and all(math.isfinite(v) and ok(v) for v in values)


def task_name(v: str) -> bool:
    """A name (load_task checks it against the built-in ones), 'package.module:attr' of identifiers, or
    'path/to/file.py:attr': an import path that is relative ('..x:y') or empty (':y') cannot be imported
    and is no task."""
    if ":" not in v:
        return bool(v.strip())
    module, _, attr = v.rpartition(":")
    if module.endswith(".py"):
        return len(module) > 3 and attr.isidentifier()
    return all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()


def choice(*options: str) -> Callable[[Any], bool]:
    return lambda v: v in options


def id_list(v: str) -> bool:
    """A comma list of client ids ("" for none), e.g. slow-clients and hostile-clients."""
    return all(t.strip().isdigit() for t in v.split(",")) if v else True


def leave_list(v: str) -> bool:
    """``leave``: "client:start:length,..." of integers, length >= 1 ("" for none); = core.sampling.parse_leave."""
    items = [t.strip() for t in v.split(",") if t.strip()]
    return all(re.fullmatch(r"\d+:\d+:\d+", t) and int(t.split(":")[2]) >= 1 for t in items)


@dataclass(frozen=True)
class NoParams(Settings):
    """A method that reads no key of its own."""


# --- the groups every run has ---------------------------------------------------------------------

@dataclass(frozen=True)
class Run(Settings):
    """What runs, on which data, and where results go."""

    strategy: str = key("zohfl", "a method's name (zofl.methods.STRATEGIES; zofl run --help lists them)",
        "the method: its server aggregation and client work", "run", lambda v: bool(v.strip()))
    engine: str = key("sync", f"one of {ENGINES}",
        "sync: Flower's Message API; legacy: Flower's legacy Strategy API (same numbers); async: updates "
        "applied as replies arrive (fedbuff)", "run", choice(*ENGINES))
    task: str = key("softmax", "a built-in task name (softmax), 'package.module:attr' or 'path/to/file.py:attr'",
        "data + model + loss plug-in (zofl.tasks)", "paper", lambda v: task_name(v))
    dataset: str = key("digits", f"one of {DATASETS}",
        "dataset of the built-in tasks; digits ships with scikit-learn (offline default)", "run", choice(*DATASETS))
    data_dir: str = key("~/.cache/zofl/data", "an absolute path (~ allowed)",
        "where <dataset>.npz files are read from (and downloaded to)",
        "run", lambda v: Path(v).expanduser().is_absolute())
    standardize: bool = key(False, "true or false",
        "scale every feature to zero mean and unit variance over the training rows (server and clients; "
        "the test rows use the same scaling): for raw CIFAR-10 pixels, where [0, 1] inputs break x_0", "ours")
    download: bool = key(False, "true or false",
        "fetch a missing dataset (torchvision; covtype: scikit-learn) into data-dir (needs a network)", "run")
    seed: int = key(0, "an integer in [0, 2**63 - 1]",
        "seed of the splits, directions, minibatches and sampling", "run", lambda v: 0 <= v <= INT64_MAX)
    num_rounds: int = key(20, "an integer in [1, 100000]",
        "R, communication rounds (server steps for the "
        "asynchronous engine)", "run", lambda v: 1 <= v <= MAX_ROUNDS)
    output_dir: str = key("~/zofl-results", "an absolute path (~ allowed)",
        "results go to <output-dir>/<run-name>/", "run", lambda v: Path(v).expanduser().is_absolute())
    run_name: str = key("", f"letters, digits, '.', '_' and '-', not starting with '.', at most {MAX_RUN_NAME} "
        "characters (empty: <strategy>-<dataset>-<time>)",
        "results folder name",
        "run", lambda v: re.fullmatch(r"([A-Za-z0-9_-][A-Za-z0-9._-]*)?", v) is not None and len(v) <= MAX_RUN_NAME)
    checkpoint_every: int = key(1, "an integer >= 0 (0 = never)",
        "save the server's state every K rounds (atomically) for resume", "run", lambda v: v >= 0)
    resume: bool = key(False, "true or false (needs run-name)",
        "continue the run <output-dir>/<run-name> from its last checkpoint", "run")
    client_wait_s: float = key(60.0, "a number > 0",
        "how long the server waits for num-clients SuperNodes", "run", positive)
    clients_per_node: int = key(0, "an integer >= 0 (0: auto)",
        "simulation: clients each SuperNode serves (every message names its client; numbers as with one node per "
        "client). 0 = auto: one node per client up to 100 clients, at most 100 nodes beyond. Every engine and "
        "strategy with zofl's ClientApp; a user's App keeps one client per node (zofl.core.shares, docs/engines.md)",
        "run", nonnegative)


@dataclass(frozen=True)
class Evaluation(Settings):
    """Evaluation (zofl.core.evaluation): the server's test pass, and the clients' on their own held-out data."""

    federated_eval: bool = key(False, "true or false (single-level tasks)",
        "every eval-every rounds (and the last) the clients evaluate x_r on their held-out data through Flower's "
        "evaluate messages; the record's fed_loss and fed_acc weight their answers by examples (beside the "
        "server's test_loss and test_acc). A simulated client's held-out data: its share of the test set", "ours")
    eval_every: int = key(1, "an integer in [1, 100000]",
        "rounds between two evaluations, the server's (its test pass: test_loss, test_acc, f1 and a task's own "
        "fields) and, with federated-eval, the clients'; x_0 and the last round are always evaluated by the "
        "server. The other records hold the server's evaluation fields as null and eval_skipped = true", "ours",
        lambda v: 1 <= v <= MAX_ROUNDS)


@dataclass(frozen=True)
class Data(Settings):
    """The federation's data: m clients, the Dirichlet split and the server's share."""

    num_clients: int = key(10, "an integer >= 1 (= num-supernodes)",
        "m, the number of clients", "paper", lambda v: v >= 1)
    alpha: float = key(1.0, "a number > 0",
        "Dirichlet concentration of the client split (large = iid)", "paper", positive)
    server_fraction: float = key(0.3, "a number in [0, 1)",
        "share of the training data held by the server", "paper", lambda v: 0 <= v < 1)
    data_path: str = key("", "empty, or a .npz / .parquet / .csv file, a datasets save_to_disk folder (absolute paths, "
        "~ allowed) or a module:function loader",
        "the run's data instead of `dataset` (simulation: split over the clients by `partitioner`; docs/data.md). Read "
        "with label-column, feature-columns (tables), x-key, y-key (.npz) and client-column", "ours",
        lambda v: not v.strip() or ":" in v and not v.startswith(("/", "~")) or Path(v).expanduser().is_absolute())
    label_column: str = key("label", "a column name", "data-path's label column (tables and folders)", "ours",
        lambda v: bool(v.strip()))
    feature_columns: str = key("", "a comma list of column names (empty: every other numeric column)",
        "data-path's feature columns (tables and folders)", "ours")
    x_key: str = key("x", "an array name", "data-path's features in a .npz (a Keras-style x_train/x_test file is "
        "recognised by its keys)", "ours", lambda v: bool(v.strip()))
    y_key: str = key("y", "an array name", "data-path's labels in a .npz", "ours", lambda v: bool(v.strip()))
    client_column: str = key("", "a column (or .npz array) name, empty for none",
        "data-path's client id per example (never a feature): what partitioner 'natural' and 'grouped-natural' "
        "split by", "ours")
    partitioner: str = key("dirichlet", f"one of {PARTITIONERS}",
        "how the clients' data are split in simulation (flwr-datasets' partitioners): dirichlet over labels (alpha, "
        "min-partition-size; the papers'), iid, pathological (classes-per-client), shards (shards-per-client), "
        "natural (one client per distinct client-column value: num-clients must be their number), grouped-natural "
        "(group-size of them per client)", "ours", choice(*PARTITIONERS))
    classes_per_client: int = key(2, "an integer >= 1", "partitioner 'pathological': classes per client", "ours",
        lambda v: v >= 1)
    shards_per_client: int = key(2, "an integer >= 1", "partitioner 'shards': label-sorted shards per client", "ours",
        lambda v: v >= 1)
    group_size: int = key(2, "an integer >= 1", "partitioner 'grouped-natural': distinct client ids per client",
        "ours", lambda v: v >= 1)
    num_features: int = key(0, "an integer >= 0 (0: the data's)",
        "features per example, declared: every client's data are checked against it (needed where the server reads "
        "no data of a kind it can tell the shape of: server-data = none with data of the nodes' own)", "ours",
        lambda v: v >= 0)
    num_classes: int = key(0, "an integer >= 0 (0: the data's)", "classes, declared (as num-features)", "ours",
        lambda v: v >= 0)
    server_data: str = key("dataset", "'dataset' or 'none'",
        "dataset: the server holds the run's test set and its server-fraction share (centralised evaluation, x_0 "
        "pre-training, ZO-HFL's f1, the server-side controls); none: the server reads no data at all (every N_i "
        "as the clients report it; evaluate with federated-eval)", "ours", choice("dataset", "none"))
    min_partition_size: int = key(10, "an integer >= 1",
        "smallest client partition the Dirichlet draw accepts (at most examples / m)", "ours", lambda v: v >= 1)
    split_fallback: str = key("top-up", f"one of {SPLIT_FALLBACKS}",
        "where the Dirichlet draw cannot give every client min-partition-size examples in 11 draws (e.g. 10,000 "
        "clients on MNIST): top-up takes its first draw and moves examples from the largest clients to the smaller "
        "ones (docs/data.md); fail stops the run naming the keys", "ours", choice(*SPLIT_FALLBACKS))
    split_cache: bool = key(True, "true or false",
        "keep the run's split as an index file in <data-dir>/splits/, made by the first process that needs it and "
        "memory-mapped by the others (false: every process makes it)", "run")


@dataclass(frozen=True)
class Clients(Settings):
    """Which clients take part and how fast they are (synchronous rounds and the async engine)."""

    beta: float = key(0.5, "a number in (0, 1]",
        "fraction of the m clients sampled each round", "paper", lambda v: 0 < v <= 1)
    straggler_prob: float = key(0.0, "a number in [0, 1]",
        "probability that a sampled client is a straggler this round (H = 0)", "ours", lambda v: 0 <= v <= 1)
    speed_profile: str = key("none", "'none', 'uniform', 'lognormal' or 'slow'",
        "device speeds s_i fixed per client: a solve of t seconds takes t / s_i (zofl.faults)",
        "ours", choice("none", "uniform", "lognormal", "slow"))
    speed_param: float = key(0.5, "a number > 0 (<= 1 for uniform and slow)",
        "uniform: s_i ~ U(speed-param, 1); lognormal: s_i = exp(-|N(0, speed-param^2)|); slow: s_i of the "
        "slow clients", "ours", positive)
    slow_clients: str = key("", "a comma list of client ids (with speed-profile = 'slow')",
        "the stragglers of speed-profile = 'slow' (e.g. '0,1': clients 0 and 1 at speed speed-param)", "ours", id_list)
    step_time_s: float = key(0.0, "a number >= 0",
        "simulated device time per local step at speed 1 (added to the real compute, divided by s_i)",
        "ours", nonnegative)
    leave: str = key("", "a comma list of client:start:length (integers, length >= 1; empty: none)",
        "anarchic clients: client i leaves for length steps from start and returns (async: model versions, "
        "i.e. server steps; sync engines: communication rounds); a task (round) due to it meanwhile is not sent",
        "ours", leave_list)
    availability: str = key("1", f"a comma list of probabilities in [{MIN_AVAILABILITY}, 1]",
        "async: client i takes a task with probability p_(i mod k), else sits it out (any participation); "
        "sync engines: a sampled client is contacted in a round with that probability (else not: no work, no "
        "failure); "
        f"every entry at least {MIN_AVAILABILITY}, so that a client's expected wait (1/p tasks) stays bounded",
        "ours", lambda v: floats(v, lambda p: MIN_AVAILABILITY <= p <= 1))
    local_work: str = key("1", "a comma list of numbers > 0",
        "async: client i's local steps E_i = round(w_(i mod k) H) (variable local work per client)",
        "ours", lambda v: floats(v, lambda w: w > 0))
    concurrency: int = key(0, "an integer >= 0 (0 = all clients)",
        "async: clients with work at any time", "ours", lambda v: v >= 0)


@dataclass(frozen=True)
class Faults(Settings):
    """Injected faults and hostile clients (zofl.faults, docs/robustness.md)."""

    crash_prob: float = key(0.0, "a number in [0, 1]",
        "fault injection: a sampled client raises", "ours", lambda v: 0 <= v <= 1)
    hang_prob: float = key(0.0, "a number in [0, 1] (needs round-deadline-s > 0)",
        "fault injection: a sampled client sleeps hang-s before replying", "ours", lambda v: 0 <= v <= 1)
    corrupt_prob: float = key(0.0, "a number in [0, 1]",
        "fault injection: a reply holds NaN, Inf, a wrong shape or an absurd magnitude", "ours", lambda v: 0 <= v <= 1)
    hang_s: float = key(10.0, "a number > round-deadline-s",
        "how long an injected hang lasts", "ours", positive)
    hostile_clients: str = key("", "a comma list of client ids",
        "attack injection: these clients send hostile replies (see attack)", "ours", id_list)
    attack: str = key("none", "one of none, large, sign-flip, scale",
        "what a hostile client sends: large = every value +-0.99 reply-max-abs (bounded, passes the checks); "
        "sign-flip = its honest update negated; scale = its honest update times attack-scale",
        "ours", choice("none", "large", "sign-flip", "scale"))
    attack_scale: float = key(10.0, "a number > 0",
        "attack = scale: the factor", "ours", positive)


@dataclass(frozen=True)
class Robust(Settings):
    """How the server combines client vectors (zofl.algorithms.robust)."""

    aggregation: str = key("mean", "one of mean, median, trimmed-mean, krum",
        "how the server combines the clients' vectors: the papers' mean, or a robust rule (coordinate median, "
        "coordinate trimmed mean, Krum; the computations of Flower's aggregate_* functions)",
        "ours", choice("mean", "median", "trimmed-mean", "krum"))
    trim_fraction: float = key(0.2, "a number in [0, 0.5)",
        "aggregation = trimmed-mean: the share of the largest and of the smallest values dropped per coordinate",
        "ours", lambda v: 0 <= v < 0.5)
    krum_f: int = key(1, "an integer >= 0",
        "aggregation = krum: f, the number of hostile clients it tolerates", "ours", lambda v: v >= 0)
    coef_clip: float = key(0.0, "a number >= 0 (0 = off)",
        "ZO-HFL: clip each client's two-point coefficients to +-coef-clip x the round's median magnitude "
        "(the server sees them only there)", "ours", nonnegative)


@dataclass(frozen=True)
class Policy(Settings):
    """The failure policy: deadlines, reply checks, failed rounds (zofl.core.policy)."""

    round_deadline_s: float = key(0.0, "a number >= 0 (0 = no deadline)",
        "clients whose reply misses it are dropped from the round (Flower's round_timeout)", "ours", nonnegative)
    reply_max_abs: float = key(1e6, "a number > 0",
        "replies with any |value| above it are dropped as absurd", "ours", positive)
    min_replies: int = key(1, "an integer >= 0 (0 = no minimum), at most the clients sampled per round",
        "failure policy: a round (async: a window of num-clients task results) with fewer usable replies "
        "is a failed round", "ours", lambda v: v >= 0)
    max_failed_rounds: float = key(0.5, "a number in [0, 1]",
        "failure policy: the run stops as failed (non-zero exit) once more than this fraction of its rounds "
        "(async: of the windows its updates need at least) have failed", "ours", lambda v: 0 <= v <= 1)


@dataclass(frozen=True)
class LocalSteps(Settings):
    """H_{i,r}, the local steps of a round, and the client minibatch."""

    tau: float = key(20.0, "a number >= 0",
        "H_{i,r} = ceil(tau * sqrt(r + 1)) local steps", "paper", nonnegative)
    local_steps: int = key(0, "an integer >= 0",
        "a fixed H for every round; 0 = use tau", "ours", lambda v: v >= 0)
    batch_size: int = key(32, "an integer >= 1",
        "client minibatch size", "ours", lambda v: v >= 1)


@dataclass(frozen=True)
class Clock(Settings):
    """The simulated clock and the asynchronous engine (zofl.core.asynchronous)."""

    clock: str = key("simulated", "'simulated' or 'wall'",
        "async: order replies by simulated completion time (reproducible bit for bit) or by real arrival",
        "ours", choice("simulated", "wall"))
    sim_step_s: float = key(0.01, "a number > 0",
        "async, simulated clock: device seconds per local step at speed 1 (a task takes steps * sim-step-s / s_i "
        "+ latency-s)", "ours", positive)
    latency_s: float = key(0.0, "a number >= 0",
        "async, simulated clock: communication time of every task", "ours", nonnegative)
    comm_s: float = key(0.0, "a number >= 0 (0 = free communication)",
        "simulated clocks (async, and every synchronous round): mean of the download and of the upload delay of "
        "every task (round) and client, each drawn Exp(mean comm-s) from (seed, task or round, client), stream "
        "0x74; a synchronous round lasts as long as its slowest client (zofl.faults.task_delays)", "ours", nonnegative)
    straggler_factor: float = key(1.0, "a number >= 1 (1 = no stragglers)",
        "simulated clocks: the clients in slow-clients are stragglers whose mean communication + computation "
        "time is this many times a normal client's, drawn per task: delays Exp(mean factor x comm-s), compute "
        "time x (1 + (factor - 1) Exp(1)) (the AFBO paper: at most 5 stragglers, factor 5); on top of "
        "speed-profile", "ours", lambda v: v >= 1 and math.isfinite(v))
    real_delays: str = key("off", "'off', 'sleep' or 'compute' (not 'off': a real clock, i.e. clock = 'wall' on the "
        "async engine, or a synchronous engine)",
        "where the clock is real, clients realise comm-s and straggler-factor: they sleep their drawn download and "
        "upload delays and stretch their solve by the compute multiplier (and 1 / s_i), the extra time slept "
        "('sleep') or computed on the client's thread ('compute': CPU time, so it competes for cores as a slower "
        "device's solve would); off: the two act on the simulated clock only (zofl.faults)", "ours",
        choice("off", "sleep", "compute"))
    buffer_size: int = key(2, "an integer >= 1",
        "fedbuff: K replies per server update", "ours", lambda v: v >= 1)
    reply_timeout_s: float = key(120.0, "a number > 0",
        "async: real seconds to wait for a reply the simulated clock needs next, before the client is given up; "
        "under the wall clock also the wait before a client whose SuperNode is gone (lost) gets its next task",
        "ours", positive)


@dataclass(frozen=True)
class Init(Settings):
    """X_0 (zofl.core.method.Method.init)."""

    x0: str = key("pretrained", "'zeros' or 'pretrained'",
        "x_0: the task's initial parameters (zeros for softmax), or that plus SGD epochs on the server's data",
        "ours", choice("zeros", "pretrained"))
    x0_epochs: int = key(1, "an integer >= 0",
        "epochs of server SGD for x0 = pretrained", "ours", lambda v: v >= 0)
    x0_lr: float = key(0.1, "a number > 0",
        "step of that server SGD", "ours", positive)


@dataclass(frozen=True)
class TaskSettings(Settings):
    """The built-in tasks' own keys (zofl.tasks): what a task is handed."""

    device: str = key("cpu", "'cpu' or 'cuda'",
        "where torch tasks (cnn, torch-softmax, your TorchTask) compute", "run", choice("cpu", "cuda"))
    l2: float = key(0.01, "a number >= 0",
        "FedRZO (lambda/2)||x||^2 weight (paper 001: 0.01)", "paper", nonnegative)
    x_min: float = key(0.001, "a number >= 0",
        "hyper-logistic: X = {x >= x-min 1} (paper 001's mu)", "ours", nonnegative)
    hyper_x0: float = key(0.1, "a number >= 0",
        "hyper-logistic: x_0, every client's starting L2 coefficient (projected onto x >= x-min)", "ours",
        nonnegative)
    holdout_fraction: float = key(0.3, "a number in (0, 1)",
        "hyper-logistic: share of each client's examples held out for the upper level f_i", "ours", lambda v: 0 < v < 1)
    corruption: float = key(0.5, "a number in [0, 1]",
        "hyper-cleaning: probability that a training label is replaced by a random class",
        "ours", lambda v: 0 <= v <= 1)
    lower_l2: float = key(0.001, "a number > 0",
        "hyper-cleaning: (lower-l2 / 2)||W||^2 in g_i; regularization: the bias row's fixed coefficient "
        "and every feature's starting coefficient (x_0 = log lower-l2)", "ours", positive)
    y_l2: float = key(0.1, "a number > 0",
        "fair-relu: lambda of -(lambda/2)||y||^2 (strong concavity in y)", "ours", positive)
    hidden_units: int = key(4, "an integer >= 1",
        "relu-net and softplus-net: N1, the width of the hidden layer (paper 001: 4)", "paper", lambda v: v >= 1)


# --- groups several methods share (each method's own class lists the ones it reads) ----------------
@dataclass(frozen=True)
class ServerMomentum(Settings):
    """FedAvgM's server momentum (``zofl.algorithms.server_opt``; the method fedavgm, and server-optimizer momentum)."""

    server_momentum: float = key(0.9, "a number in [0, 1)",
        "server momentum beta of FedAvgM (strategy fedavgm, or server-optimizer = momentum; Flower's "
        "server_momentum)", "ours", lambda v: 0 <= v < 1)


@dataclass(frozen=True)
class ServerOptimizer(ServerMomentum):
    """A server optimizer on a method's (pseudo-)gradient server step (``zofl.algorithms.server_opt``, Flower's
    FedAvgM / FedAdagrad / FedAdam / FedYogi formulas), with the method's own step size as its eta."""

    server_optimizer: str = key("sgd", "'sgd', 'momentum', 'adagrad', 'adam' or 'yogi'",
        "the server step x + lr delta (FedAvg, FedProx, SCAFFOLD, FedBuff: lr = server-lr; ZO-HFL: gamma_r, delta = "
        "-(grad f1 + estimate)) as it is (sgd, the papers'), or through FedAvgM's momentum or FedAdagrad / FedAdam / "
        "FedYogi (Reddi et al. 2021) with lr as eta: adaptive ones want a smaller lr (docs/user-app.md)",
        "ours", choice(*OPTIMIZERS))
    server_beta1: float = key(0.9, "a number in [0, 1)",
        "server-optimizer = adam or yogi: beta_1 (Flower's default)", "ours", lambda v: 0 <= v < 1)
    server_beta2: float = key(0.99, "a number in [0, 1)",
        "server-optimizer = adam or yogi: beta_2 (Flower's default)", "ours", lambda v: 0 <= v < 1)
    server_tau: float = key(1e-3, "a number > 0",
        "server-optimizer = adagrad, adam or yogi: tau, the adaptivity (Flower's default)", "ours", positive)


@dataclass(frozen=True)
class Smoothing(Settings):
    """The two-point zeroth-order estimate's radius (ZO-HFL, FedRZO_nn, FedRZO_bl)."""

    eta: float = key(0.1, "a number > 0",
        "smoothing radius of the zeroth-order estimate", "paper", positive)


@dataclass(frozen=True)
class CommonRandom(Settings):
    """Common random numbers of the two solves (ZO-HFL, FedRZO_bl)."""

    crn: bool = key(True, "true or false",
        "common random numbers: the two solves share their minibatches", "ours")


@dataclass(frozen=True)
class LowerSGD(Settings):
    """The lower level's local SGD step of the bilevel methods."""

    lower_lr: float = key(0.05, "a number > 0",
        "gamma~: lower-level local SGD step", "ours", positive)


@dataclass(frozen=True)
class OuterStep(Settings):
    """The server's step on x of the hyper-gradient methods."""

    outer_lr: float = key(0.1, "a number >= 0",
        "eta: the server's step on x with the (mean) hyper-gradient (0: x stays at x_0, the lower level "
        "alone: the control of every hyper-gradient figure)", "ours", nonnegative)


@dataclass(frozen=True)
class ServerInner(Settings):
    """The server's step on y (AFBO, afbo-global)."""

    inner_lr: float = key(0.5, "a number > 0",
        "beta: AFBO's server step on y with the mean stored G_i", "ours", positive)


@dataclass(frozen=True)
class NeumannSeries(Settings):
    """The inner loop and the Neumann series of FedNest, AFBO and afbo-global."""

    inner_rounds: int = key(5, "an integer >= 1",
        "K^t: inner (lower-level) steps per outer round (AFBO: server y-steps; FedNest: FedAvg rounds)",
        "ours", lambda v: v >= 1)
    neumann_steps: str = key("5", "a comma list of integers >= 1",
        "N_i: Neumann terms of client i's inverse-Hessian estimate (entry i mod k; FedNest: the first; "
        "afbo-global: the first, Neumann server steps per outer round)",
        "ours", lambda v: floats(v, lambda n: n >= 1 and float(n).is_integer()), example="3")
    lipschitz_g: float = key(10.0, "a number > 0",
        "l_{g,1}: the Neumann series' scale, at least the largest eigenvalue of grad^2_yy g", "ours", positive)


ENGINE_GROUPS = (Run, Evaluation, Data, Clients, Faults, Robust, Policy, LocalSteps, Clock, Init, TaskSettings)


@functools.lru_cache(maxsize=8)
def collect_keys(params: tuple[type, ...]) -> tuple[Key, ...]:
    """Every key of the engine groups (``ENGINE_GROUPS``) and of the groups ``params`` (the registered methods'
    Params: ``zofl.methods.keys``), in that order, each once; a key declared in two groups is refused."""
    out: dict[str, Key] = {}
    for group in (*ENGINE_GROUPS, *params):
        for k in group.keys():
            if k.name in out and out[k.name].group != k.group:
                raise ValueError(f"run-config key {k.name!r} is declared twice: in {out[k.name].group} and in "
                                 f"{k.group} (declare it once, in a group both read)")
            out.setdefault(k.name, k)
    return tuple(out.values())


@dataclass(frozen=True)
class EngineSettings(Run, Evaluation, Data, Clients, Faults, Robust, Policy, LocalSteps, Clock, Init, TaskSettings):
    """Every key every run has (``ENGINE_GROUPS``), as one typed group."""


@dataclass(frozen=True, eq=False)
class Config(EngineSettings, Mapping):
    """A validated run-config (``zofl.config.parse_config``): every key every run has as a typed, declared field
    (``cfg.num_clients``, ``cfg.seed``: ``EngineSettings``), and every key, a method's own too, by its flat name
    (``cfg["eta"]``), read-only; a method reads its own keys as its typed Params (``Method.hp``)."""

    flat: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def of_values(cls, values: Mapping[str, Any]) -> "Config":
        """The Config of a complete, validated mapping of every key (``parse_config`` builds it)."""
        return cls(**{k.field: values[k.name] for k in EngineSettings.keys()}, flat=dict(values))

    def __getitem__(self, key: str) -> Any:
        return self.flat[key]

    def __iter__(self):
        return iter(self.flat)

    def __len__(self) -> int:
        return len(self.flat)

    def keys(self):  # the mapping's (a group's declared keys: EngineSettings.keys())
        return self.flat.keys()

    def items(self):
        return self.flat.items()

    def values(self):
        return self.flat.values()

    def __eq__(self, other: object) -> bool:
        return dict(self.flat) == dict(other) if isinstance(other, Mapping) else NotImplemented

    __hash__ = None  # a mapping (its values may be changed copies: never a key)

    def with_values(self, changes: Mapping[str, Any]) -> "Config":
        """A copy with ``changes`` ({flat name: value}), unchecked: for tests and scripts that vary a validated
        config (``parse_config`` checks a run-config)."""
        return Config.of_values({**self.flat, **changes})
