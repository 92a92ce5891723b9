"""Run-config keys: defaults, documentation and validation, in one table.

Every key of ``[tool.flwr.app.config]`` in pyproject.toml is declared here with its type,
allowed values, default and where the default comes from ("paper" = the ZO-HFL paper's
experiments, "ours" = a choice the paper leaves open). ``parse_config`` checks a whole
run-config before any work starts and raises ``ConfigError`` naming the key and what is
allowed. A test keeps pyproject.toml and this table in step.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

ENGINES = ("sync", "legacy", "async")
MAX_ROUNDS = 100_000  # a bound that stops typos (1e9 rounds) before they start
INT64_MAX = 2**63 - 1  # Flower's run-config carries integers as sint64 (flwr.common.serde): 2**63 fails in flwr run
MAX_STR = 4096  # longer strings are no path, task or list anyone means (and near Linux's 128 KiB argument limit)
# the smallest availability: a client with probability p sits out (1 - p) / p tasks on average, each costing the
# asynchronous engine a draw and an event; p = 0 never ends, p = 1e-6 spins a million events per task. At 0.01 a
# task costs at most ~100 events, and a streak of 5000 misses has probability 0.99**5000 < 1e-21.
MIN_AVAILABILITY = 0.01
DATASETS = ("digits", "covtype", "mnist", "fashion_mnist", "cifar10")  # = zofl.tasks.data.DATASETS (tested)


class ConfigError(ValueError):
    """A run-config value is not allowed; the message names the key and the allowed values."""


@dataclass(frozen=True)
class Key:
    name: str
    type: type
    default: Any
    allowed: str  # human-readable rule, shown in errors
    doc: str
    source: str = "ours"  # "paper", "ours" or "run"
    check: Callable[[Any], bool] = lambda v: True


def _pos(v) -> bool:
    return v > 0 and math.isfinite(v)


def _nonneg(v) -> bool:
    return v >= 0 and math.isfinite(v)


def _floats(text: str, ok: Callable[[float], bool]) -> bool:
    try:
        values = [float(t) for t in text.split(",")]
    except ValueError:
        return False
    return bool(values) and all(math.isfinite(v) and ok(v) for v in values)


def _task_name(v: str) -> bool:
    """A name (load_task checks it against the built-in ones), or 'package.module:attr' of identifiers:
    an import path that is relative ('..x:y') or empty (':y') cannot be imported and is no task."""
    if ":" not in v:
        return bool(v.strip())
    module, _, attr = v.partition(":")
    return all(part.isidentifier() for part in module.split(".")) and attr.isidentifier()


def _choice(*options: str) -> Callable[[Any], bool]:
    return lambda v: v in options


def _id_list(v: str) -> bool:
    """A comma list of client ids ("" for none), e.g. slow-clients and hostile-clients."""
    return all(t.strip().isdigit() for t in v.split(",")) if v else True


def _leave_list(v: str) -> bool:
    """``leave``: "client:start:length,..." of integers, length >= 1 ("" for none); = core.sampling.parse_leave."""
    items = [t.strip() for t in v.split(",") if t.strip()]
    return all(re.fullmatch(r"\d+:\d+:\d+", t) and int(t.split(":")[2]) >= 1 for t in items)


KEYS: tuple[Key, ...] = (
    # --- what runs -------------------------------------------------------------------------
    Key("strategy", str, "zohfl", "a method's name (zofl.methods.STRATEGIES; zofl run --help lists them)",
        "the method: its server aggregation and client work", "run", lambda v: bool(v.strip())),
    Key("engine", str, "sync", f"one of {ENGINES}",
        "sync: Flower's Message API; legacy: Flower's legacy Strategy API (same numbers); async: updates "
        "applied as replies arrive (fedbuff)", "run", _choice(*ENGINES)),
    Key("task", str, "softmax", "a built-in task name (softmax) or 'package.module:attr'",
        "data + model + loss plug-in (zofl.tasks)", "paper", lambda v: _task_name(v)),
    Key("dataset", str, "digits", f"one of {DATASETS}",
        "dataset of the built-in tasks; digits ships with scikit-learn (offline default)", "run", _choice(*DATASETS)),
    Key("data-dir", str, "~/.cache/zofl/data", "an absolute path (~ allowed)",
        "where <dataset>.npz files are read from (and downloaded to)", "run",
        lambda v: Path(v).expanduser().is_absolute()),
    Key("device", str, "cpu", "'cpu' or 'cuda'", "where torch tasks (cnn, torch-softmax, your TorchTask) compute",
        "run", _choice("cpu", "cuda")),
    Key("standardize", bool, False, "true or false",
        "scale every feature to zero mean and unit variance over the training rows (server and clients; "
        "the test rows use the same scaling): for raw CIFAR-10 pixels, where [0, 1] inputs break x_0", "ours"),
    Key("download", bool, False, "true or false",
        "fetch a missing dataset (torchvision; covtype: scikit-learn) into data-dir (needs a network)", "run"),
    Key("seed", int, 0, "an integer in [0, 2**63 - 1]", "seed of the splits, directions, minibatches and sampling",
        "run", lambda v: 0 <= v <= INT64_MAX),
    Key("num-rounds", int, 20, "an integer in [0, 100000]", "R, communication rounds (server steps for the "
        "asynchronous engine)", "run", lambda v: 0 <= v <= MAX_ROUNDS),
    Key("output-dir", str, "~/zofl-results", "an absolute path (~ allowed)",
        "results go to <output-dir>/<run-name>/", "run", lambda v: Path(v).expanduser().is_absolute()),
    Key("run-name", str, "", "letters, digits, '.', '_' and '-', not starting with '.' (empty: "
        "<strategy>-<dataset>-<time>)", "results folder name", "run",
        lambda v: re.fullmatch(r"([A-Za-z0-9_-][A-Za-z0-9._-]*)?", v) is not None and len(v) <= 200),
    Key("checkpoint-every", int, 1, "an integer >= 0 (0 = never)",
        "save the server's state every K rounds (atomically) for resume", "run", lambda v: v >= 0),
    Key("resume", bool, False, "true or false (needs run-name)",
        "continue the run <output-dir>/<run-name> from its last checkpoint", "run"),
    Key("client-wait-s", float, 60.0, "a number > 0", "how long the server waits for num-clients SuperNodes", "run",
        _pos),
    # --- heterogeneity ---------------------------------------------------------------------
    Key("num-clients", int, 10, "an integer >= 1 (= num-supernodes)", "m, the number of clients", "paper",
        lambda v: v >= 1),
    Key("alpha", float, 1.0, "a number > 0", "Dirichlet concentration of the client split (large = iid)", "paper",
        _pos),
    Key("beta", float, 0.5, "a number in (0, 1]", "fraction of the m clients sampled each round", "paper",
        lambda v: 0 < v <= 1),
    Key("server-fraction", float, 0.3, "a number in [0, 1)", "share of the training data held by the server",
        "paper", lambda v: 0 <= v < 1),
    Key("min-partition-size", int, 10, "an integer >= 1",
        "smallest client partition the Dirichlet draw accepts (at most examples / m)", "ours", lambda v: v >= 1),
    Key("straggler-prob", float, 0.0, "a number in [0, 1]",
        "probability that a sampled client is a straggler this round (H = 0)", "ours", lambda v: 0 <= v <= 1),
    Key("speed-profile", str, "none", "'none', 'uniform', 'lognormal' or 'slow'",
        "device speeds s_i fixed per client: a solve of t seconds takes t / s_i (zofl.faults)", "ours",
        _choice("none", "uniform", "lognormal", "slow")),
    Key("speed-param", float, 0.5, "a number > 0 (<= 1 for uniform and slow)",
        "uniform: s_i ~ U(speed-param, 1); lognormal: s_i = exp(-|N(0, speed-param^2)|); slow: s_i of the "
        "slow clients", "ours", _pos),
    Key("slow-clients", str, "", "a comma list of client ids (with speed-profile = 'slow')",
        "the stragglers of speed-profile = 'slow' (e.g. '0,1': clients 0 and 1 at speed speed-param)", "ours",
        _id_list),
    Key("step-time-s", float, 0.0, "a number >= 0",
        "simulated device time per local step at speed 1 (added to the real compute, divided by s_i)", "ours",
        _nonneg),
    Key("round-deadline-s", float, 0.0, "a number >= 0 (0 = no deadline)",
        "clients whose reply misses it are dropped from the round (Flower's round_timeout)", "ours", _nonneg),
    Key("crash-prob", float, 0.0, "a number in [0, 1]", "fault injection: a sampled client raises", "ours",
        lambda v: 0 <= v <= 1),
    Key("hang-prob", float, 0.0, "a number in [0, 1] (needs round-deadline-s > 0)",
        "fault injection: a sampled client sleeps hang-s before replying", "ours", lambda v: 0 <= v <= 1),
    Key("corrupt-prob", float, 0.0, "a number in [0, 1]",
        "fault injection: a reply holds NaN, Inf, a wrong shape or an absurd magnitude", "ours",
        lambda v: 0 <= v <= 1),
    Key("hang-s", float, 10.0, "a number > round-deadline-s", "how long an injected hang lasts", "ours", _pos),
    Key("reply-max-abs", float, 1e6, "a number > 0",
        "replies with any |value| above it are dropped as absurd", "ours", _pos),
    # --- hostile clients and robust aggregation (ours; zofl.algorithms.robust, zofl.faults) -------
    Key("aggregation", str, "mean", "one of mean, median, trimmed-mean, krum",
        "how the server combines the clients' vectors: the papers' mean, or a robust rule (coordinate median, "
        "coordinate trimmed mean, Krum; the computations of Flower's aggregate_* functions)", "ours",
        _choice("mean", "median", "trimmed-mean", "krum")),
    Key("trim-fraction", float, 0.2, "a number in [0, 0.5)",
        "aggregation = trimmed-mean: the share of the largest and of the smallest values dropped per coordinate",
        "ours", lambda v: 0 <= v < 0.5),
    Key("krum-f", int, 1, "an integer >= 0", "aggregation = krum: f, the number of hostile clients it tolerates",
        "ours", lambda v: v >= 0),
    Key("coef-clip", float, 0.0, "a number >= 0 (0 = off)",
        "ZO-HFL: clip each client's two-point coefficients to +-coef-clip x the round's median magnitude "
        "(the server sees them only there)", "ours", _nonneg),
    Key("hostile-clients", str, "", "a comma list of client ids",
        "attack injection: these clients send hostile replies (see attack)", "ours",
        _id_list),
    Key("attack", str, "none", "one of none, large, sign-flip, scale",
        "what a hostile client sends: large = every value +-0.99 reply-max-abs (bounded, passes the checks); "
        "sign-flip = its honest update negated; scale = its honest update times attack-scale", "ours",
        _choice("none", "large", "sign-flip", "scale")),
    Key("attack-scale", float, 10.0, "a number > 0", "attack = scale: the factor", "ours", _pos),
    Key("min-replies", int, 1, "an integer >= 0 (0 = no minimum), at most the clients sampled per round",
        "failure policy: a round (async: a window of num-clients task results) with fewer usable replies "
        "is a failed round", "ours", lambda v: v >= 0),
    Key("max-failed-rounds", float, 0.5, "a number in [0, 1]",
        "failure policy: the run stops as failed (non-zero exit) once more than this fraction of its rounds "
        "(async: of the windows its updates need at least) have failed", "ours", lambda v: 0 <= v <= 1),
    Key("tau", float, 20.0, "a number >= 0", "H_{i,r} = ceil(tau * sqrt(r + 1)) local steps", "paper", _nonneg),
    Key("local-steps", int, 0, "an integer >= 0", "a fixed H for every round; 0 = use tau", "ours",
        lambda v: v >= 0),
    # --- the asynchronous engine (engine = async) ---------------------------------------------
    Key("clock", str, "simulated", "'simulated' or 'wall'",
        "async: order replies by simulated completion time (reproducible bit for bit) or by real arrival", "ours",
        _choice("simulated", "wall")),
    Key("sim-step-s", float, 0.01, "a number > 0",
        "async, simulated clock: device seconds per local step at speed 1 (a task takes steps * sim-step-s / s_i "
        "+ latency-s)", "ours", _pos),
    Key("latency-s", float, 0.0, "a number >= 0", "async, simulated clock: communication time of every task",
        "ours", _nonneg),
    Key("comm-s", float, 0.0, "a number >= 0 (0 = free communication)",
        "simulated clocks (async, and every synchronous round): mean of the download and of the upload delay of "
        "every task (round) and client, each drawn Exp(mean comm-s) from (seed, task or round, client), stream "
        "0x74; a synchronous round lasts as long as its slowest client (zofl.faults.task_delays)", "ours",
        _nonneg),
    Key("straggler-factor", float, 1.0, "a number >= 1 (1 = no stragglers)",
        "simulated clocks: the clients in slow-clients are stragglers whose mean communication + computation "
        "time is this many times a normal client's, drawn per task: delays Exp(mean factor x comm-s), compute "
        "time x (1 + (factor - 1) Exp(1)) (the AFBO paper: at most 5 stragglers, factor 5); on top of "
        "speed-profile", "ours", lambda v: v >= 1 and math.isfinite(v)),
    Key("leave", str, "", "a comma list of client:start:length (integers, length >= 1; empty: none)",
        "anarchic clients: client i leaves for length steps from start and returns (async: model versions, "
        "i.e. server steps; sync engines: communication rounds); a task (round) due to it meanwhile is not sent",
        "ours", _leave_list),
    Key("availability", str, "1", f"a comma list of probabilities in [{MIN_AVAILABILITY}, 1]",
        "async: client i takes a task with probability p_(i mod k), else sits it out (any participation); "
        "sync engines: a sampled client is contacted in a round with that probability (else not: no work, no "
        "failure); "
        f"every entry at least {MIN_AVAILABILITY}, so that a client's expected wait (1/p tasks) stays bounded",
        "ours", lambda v: _floats(v, lambda p: MIN_AVAILABILITY <= p <= 1)),
    Key("local-work", str, "1", "a comma list of numbers > 0",
        "async: client i's local steps E_i = round(w_(i mod k) H) (variable local work per client)", "ours",
        lambda v: _floats(v, lambda w: w > 0)),
    Key("concurrency", int, 0, "an integer >= 0 (0 = all clients)", "async: clients with work at any time", "ours",
        lambda v: v >= 0),
    Key("buffer-size", int, 2, "an integer >= 1", "fedbuff: K replies per server update", "ours",
        lambda v: v >= 1),
    Key("staleness-exponent", float, 0.5, "a number >= 0",
        "fedbuff: a reply s versions stale is weighted (1 + s)^-a (FedBuff's 1/sqrt(1 + s): a = 0.5)", "paper",
        _nonneg),
    Key("reply-timeout-s", float, 120.0, "a number > 0",
        "async: real seconds to wait for a reply the simulated clock needs next, before the client is given up; "
        "under the wall clock also the wait before a client whose SuperNode is gone (lost) gets its next task",
        "ours", _pos),
    # --- ZO-HFL ----------------------------------------------------------------------------
    Key("eta", float, 0.1, "a number > 0", "smoothing radius of the zeroth-order estimate", "paper", _pos),
    Key("gamma", float, 0.01, "a number > 0", "server step gamma_r = gamma / sqrt(r + 1)", "paper", _pos),
    Key("client-lr", float, 0.1, "a number > 0", "g~: client step g~ / (t + Gamma)", "paper", _pos),
    Key("client-lr-gamma", float, 1.0, "a number > 0",
        "Gamma of the client step g~ / (t + Gamma): 1 in the experiments; Proposition 1's rate needs mu_h g~ > 1 "
        "and g~ / Gamma <= mu_h / (2 L^2), so Gamma > 2 (L / mu_h)^2 >= 2 (docs/zohfl.md)", "paper", _pos),
    Key("lambda", float, 10.0, "a number >= 0", "weight of f2 = (lambda/2)||x - y_i||^2", "ours", _nonneg),
    Key("mu", float, 1.0, "a number > 0", "proximal weight of h_i = loss_i(y) + (mu/2)||x - y||^2", "ours", _pos),
    Key("batch-size", int, 32, "an integer >= 1", "client minibatch size", "ours", lambda v: v >= 1),
    Key("server-batch-size", int, 32, "an integer >= 1", "server minibatch size for grad f1", "ours",
        lambda v: v >= 1),
    Key("directions", int, 1, "an integer >= 1", "sphere directions per client per round (paper: 1)", "paper",
        lambda v: v >= 1),
    Key("orthogonal-directions", bool, False, "true or false",
        "the k = directions of a client in a round are orthonormal (ours; default: independent draws)", "ours"),
    Key("estimator", str, "two-point", "'two-point' or 'envelope'",
        "ZO-HFL's f2 part: the paper's two-point estimate, or (ours, beyond the paper) sum_i w_i lambda "
        "(x - y_i(x)) from one solve at x_r per client (the gradient of a Moreau-envelope objective, not of "
        "problem (1); each client uploads y_i, n floats; needs ball-radius = 0)", "ours",
        _choice("two-point", "envelope")),
    Key("crn", bool, True, "true or false", "common random numbers: the two solves share their minibatches",
        "ours"),
    Key("uplink", str, "scalars", "'scalars' or 'vectors'",
        "vectors: clients send y+ and y- (the paper); scalars: the two f2 values (same iterates)", "ours",
        _choice("scalars", "vectors")),
    Key("weighting", str, "uniform", "'uniform', 'participants' or 'rho'",
        "w_i of a client's estimate: 1/m (Alg. 1), 1/|S_r|, or rho_i = N_i/N_train", "paper",
        _choice("uniform", "participants", "rho")),
    Key("ball-radius", float, 0.0, "a number >= 0", "radius of Y_i(x) = {||y - x|| <= radius}; 0 = R^n", "ours",
        _nonneg),
    Key("x0", str, "pretrained", "'zeros' or 'pretrained'",
        "x_0: the task's initial parameters (zeros for softmax), or that plus SGD epochs on the server's data",
        "ours", _choice("zeros", "pretrained")),
    Key("x0-epochs", int, 1, "an integer >= 0", "epochs of server SGD for x0 = pretrained", "ours",
        lambda v: v >= 0),
    Key("x0-lr", float, 0.1, "a number > 0", "step of that server SGD", "ours", _pos),
    # --- baselines (FedAvg, FedProx, SCAFFOLD): K = 2 H_{i,r} local steps, as ZO-HFL's two solves ---
    Key("local-lr", float, 0.3, "a number > 0", "baselines' client step (docs/results/study.md)", "ours", _pos),
    Key("local-lr-schedule", str, "round-sqrt", "'constant', 'round-sqrt' or 'step'",
        "baselines' client step: lr, lr/sqrt(r+1), or lr/(t+1) within a round", "ours",
        _choice("constant", "round-sqrt", "step")),
    Key("server-lr", float, 1.0, "a number > 0", "baselines' server step on the averaged update", "ours", _pos),
    Key("prox-mu", float, 0.01, "a number >= 0", "FedProx proximal weight", "ours", _nonneg),
    # --- FedRZO_nn (paper 001, Algorithm 1) ----------------------------------------------------
    Key("zo-lr", float, 1e-5, "a number > 0", "FedRZO local step gamma (paper 001: 1e-5)", "paper", _pos),
    Key("l2", float, 0.01, "a number >= 0", "FedRZO (lambda/2)||x||^2 weight (paper 001: 0.01)", "paper", _nonneg),
    Key("loss-scale", str, "mean", "'sum' or 'mean'",
        "FedRZO client objective: the mean over the client's examples (a per-sample oracle), or the sum as "
        "written in the paper's Sec. 5.1 (diverges with gamma = 1e-5: docs/fedrzo.md)", "ours",
        _choice("sum", "mean")),
    Key("local-sets", str, "box,ball", "a comma list of box, ball, none",
        "FedRZO local sets X_i: client i takes entry i mod k", "ours",
        lambda v: bool(v) and all(k in ("box", "ball", "none") for k in v.split(","))),
    Key("box-bound", float, 1.0, "a number > 0", "X_i = [-b, b]^n for a box client", "ours", _pos),
    Key("set-radius", float, 10.0, "a number > 0", "X_i = {||x|| <= radius} for a ball client", "ours", _pos),
    # --- FedRZO_bl (paper 001, Algorithms 2 and 3); num-rounds counts upper rounds ---------------
    Key("lower-rounds", int, 2, "an integer >= 1",
        "R~_0: lower-level FedAvg rounds per oracle call in upper round 0", "ours", lambda v: v >= 1),
    Key("lower-rounds-growth", float, 0.1, "a number >= 0",
        "R~_r = lower-rounds + floor(growth * r): the oracle runs longer as r grows (paper: O(r))", "ours",
        _nonneg),
    Key("lower-local-steps", int, 10, "an integer >= 1", "H~: local SGD steps per lower-level round", "ours",
        lambda v: v >= 1),
    Key("lower-lr", float, 0.05, "a number > 0", "gamma~: lower-level local SGD step", "ours", _pos),
    Key("lower-warm-start", bool, True, "true or false",
        "each oracle call starts from the last y_eps(x_r) (else from the task's y_0)", "ours"),
    Key("upper-set", str, "task", "'task', 'local-sets' or 'none'",
        "FedRZO_bl's X_i: the task's set (hyper-logistic: x >= x-min), the local-sets, or R^n", "ours",
        _choice("task", "local-sets", "none")),
    Key("x-min", float, 0.001, "a number >= 0", "hyper-logistic: X = {x >= x-min 1} (paper 001's mu)", "ours",
        _nonneg),
    Key("holdout-fraction", float, 0.3, "a number in (0, 1)",
        "hyper-logistic: share of each client's examples held out for the upper level f_i", "ours",
        lambda v: 0 < v < 1),
    # --- hyper-gradient bilevel methods: AFBO (paper 002) and FedNest --------------------------------
    Key("inner-rounds", int, 5, "an integer >= 1",
        "K^t: inner (lower-level) steps per outer round (AFBO: server y-steps; FedNest: FedAvg rounds)", "ours",
        lambda v: v >= 1),
    Key("inner-lr", float, 0.5, "a number > 0", "beta: AFBO's server step on y with the mean stored G_i", "ours",
        _pos),
    Key("outer-lr", float, 0.1, "a number >= 0",
        "eta: the server's step on x with the (mean) hyper-gradient (0: x stays at x_0, the lower level "
        "alone: the control of every hyper-gradient figure)", "ours", _nonneg),
    Key("neumann-steps", str, "5", "a comma list of integers >= 1",
        "N_i: Neumann terms of client i's inverse-Hessian estimate (entry i mod k; FedNest: the first; "
        "afbo-global: the first, Neumann server steps per outer round)", "ours",
        lambda v: _floats(v, lambda n: n >= 1 and float(n).is_integer())),
    Key("lipschitz-g", float, 10.0, "a number > 0",
        "l_{g,1}: the Neumann series' scale, at least the largest eigenvalue of grad^2_yy g", "ours", _pos),
    Key("aphe", str, "random-depth", "'random-depth', 'sum' or 'printed'",
        "APHE's reading of Algorithm 2 (zofl.algorithms.afbo.aphe): random depth (the cited estimator), "
        "the truncated sum, or the fixed-depth product as printed", "ours",
        _choice("random-depth", "sum", "printed")),
    Key("stored-average", str, "stored", "'stored' or 'all'",
        "AFBO: average the stored updates over the clients heard from, or over all m (never heard = 0)", "ours",
        _choice("stored", "all")),
    Key("max-outer-delay", int, 0, "an integer >= 0 (0 = no bound)",
        "AFBO's tau_M (Assumption 6): a client whose newest H_i is more than this many outer rounds old "
        "computes a new one before more inner work", "ours", lambda v: v >= 0),
    # --- ADBO / SDBO (Jiao et al. 2023; zofl.methods.adbo, docs/afbo.md "ADBO") ----------------------
    Key("delay-bound", int, 5, "an integer >= 1",
        "ADBO's tau: the master waits for a worker whose last update is tau - 1 of its steps old (1: all, "
        "every step)", "ours", lambda v: v >= 1),
    Key("cut-every", int, 5, "an integer >= 1", "ADBO's k_pre: outer steps between cutting-plane updates",
        "ours", lambda v: v >= 1),
    Key("cut-steps", int, 5, "an integer >= 1",
        "ADBO: K synchronous rounds of the consensus lower problem behind each new cutting plane", "ours",
        lambda v: v >= 1),
    Key("cut-penalty", float, 1.0, "a number >= 0", "ADBO: mu of the lower problem's (mu/2)||y_j - z||^2",
        "ours", _nonneg),
    Key("cut-dual-init", float, 0.0, "a number >= 0", "ADBO: a new cutting plane's dual lambda_l", "ours",
        _nonneg),
    Key("max-cuts", int, 20, "an integer >= 1",
        "ADBO: cutting-plane slots (a full set replaces the plane with the smallest dual)", "ours",
        lambda v: v >= 1),
    Key("drop-inactive-cuts", bool, True, "true or false",
        "ADBO: remove the planes whose dual is ~0 before a new one is added (the public code's active_set)",
        "ours"),
    Key("cut-warm-start", bool, False, "true or false",
        "ADBO: the lower problem's duals phi_j start from their last values (false: from 0, as the code)", "ours"),
    Key("dual-lr", float, 0.1, "a number > 0", "ADBO: ascent step of the duals lambda, theta_j and phi_j",
        "ours", _pos),
    Key("dual-reg", float, 0.0, "a number >= 0", "ADBO: c1 = c2, the regularization of the duals in L", "ours",
        _nonneg),
    Key("cut-gradient", str, "full", "'full' or 'code'",
        "ADBO: the cutting plane's a = grad_v phi. full (ours): the v-gradient through the K coupled lower "
        "rounds (the workers' y_j steps, the master's z_k and phi_j), by K reverse rounds; code (the authors' "
        "public code): y_j's own K steps only, phi_j and z_k held fixed, z^K's term dropped (its fixed point is "
        "biased, docs/afbo.md \"ADBO\")", "ours", _choice("full", "code")),
    Key("cut-start-gradient", bool, False, "true or false (true needs cut-gradient = 'full')",
        "ADBO: the cutting plane's b_j, c also carry phi's gradient through the start point (y_j, z) of the K "
        "lower rounds (the adjoints the reverse rounds end with; ours: then the plane is phi's full first-order "
        "expansion); false: b_j = 2 (y_j - y_j^K), c = 2 (z - z^K), as the authors' code, whose fixed point is "
        "biased by O(||d(y^K, z^K)/d(y_j, z)||)", "ours"),
    Key("cut-normalize", bool, False, "true or false",
        "ADBO: store each cutting plane divided by the norm of its normal (a, b_j, c): the same half-space, "
        "but its dual no longer has to grow as the plane's gradient 2 (y_j - y_j^K) -> 0 (ours; false: as the "
        "authors' code)", "ours"),
    Key("corruption", float, 0.5, "a number in [0, 1]",
        "hyper-cleaning: probability that a training label is replaced by a random class", "ours",
        lambda v: 0 <= v <= 1),
    Key("lower-l2", float, 0.001, "a number > 0",
        "hyper-cleaning: (lower-l2 / 2)||W||^2 in g_i; regularization: the bias row's fixed coefficient "
        "and every feature's starting coefficient (x_0 = log lower-l2)", "ours", _pos),
    Key("y-l2", float, 0.1, "a number > 0", "fair-relu: lambda of -(lambda/2)||y||^2 (strong concavity in y)",
        "ours", _pos),
)
KEY_BY_NAME = {k.name: k for k in KEYS}

class Config(dict):
    """A validated run-config; keys readable as attributes with '-' -> '_' (cfg.num_clients)."""

    def __getattr__(self, attr: str) -> Any:
        try:
            return self[attr.replace("_", "-")]
        except KeyError as exc:
            raise AttributeError(attr) from exc


def defaults() -> dict[str, Any]:
    return {k.name: k.default for k in KEYS}


def _show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error stays one readable line whatever was given."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _coerce(key: Key, value: Any) -> Any:
    """``value`` as the key's type, or a ConfigError. Integers must fit Flower's sint64 (and floats'
    range), strings must be what Flower's ``--run-config`` can carry (no '"' or control characters)."""
    if isinstance(value, int) and not isinstance(value, bool) and key.type in (int, float) \
            and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed} and fit a signed 64-bit integer "
                          f"(Flower's run-config), got {_show(value)}")
    if key.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if key.type is int and isinstance(value, float) and value.is_integer() and abs(value) <= INT64_MAX:
        return int(value)
    if not isinstance(value, key.type) or (key.type is not bool and isinstance(value, bool)):
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, got {_show(value)} "
                          f"({type(value).__name__})")
    if isinstance(value, str):
        _check_text(key, value)
    return value


def _check_text(key: Key, value: str) -> None:
    """Flower passes the run-config to its processes as one TOML line (``flwr run --run-config``), split
    by a pattern that ends a string at the first '"': a '"' or a control character (a newline, NUL) cannot
    get through, and a path with one could not be opened anyway."""
    bad = sorted({c for c in value if c == '"' or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, without '\"' or control "
                          f"characters, got {_show(value)} (holds {', '.join(repr(c) for c in bad)})")
    if len(value) > MAX_STR:
        raise ConfigError(f"run-config key {key.name!r} must be {key.allowed}, at most {MAX_STR} characters, "
                          f"got {len(value)}")


def _cross_checks(cfg: Config) -> None:
    """Rules that involve several keys."""
    if cfg.speed_profile in ("uniform", "slow") and cfg.speed_param > 1:
        raise ConfigError(f"run-config key 'speed-param' must be in (0, 1] with speed-profile = "
                          f"{cfg.speed_profile!r}, got {cfg.speed_param}")
    for key, ids in (("slow-clients", cfg.slow_clients), ("hostile-clients", cfg.hostile_clients)):
        bad = [int(t) for t in ids.split(",") if t and int(t) >= cfg.num_clients]
        if bad:
            raise ConfigError(f"run-config key {key!r} names clients {bad}, but num-clients={cfg.num_clients} "
                              f"(ids 0..{cfg.num_clients - 1})")
    bad = [int(t.split(":")[0]) for t in cfg.leave.split(",") if t.strip() and int(t.split(":")[0]) >= cfg.num_clients]
    if bad:
        raise ConfigError(f"run-config key 'leave' names clients {bad}, but num-clients={cfg.num_clients} "
                          f"(ids 0..{cfg.num_clients - 1})")
    if cfg.hostile_clients and cfg.attack == "none":
        raise ConfigError("run-config key 'hostile-clients' is set but attack = 'none': choose large, sign-flip or "
                          "scale (or leave hostile-clients empty)")
    total = cfg.crash_prob + cfg.hang_prob + cfg.corrupt_prob
    if total > 1:
        raise ConfigError(f"run-config keys 'crash-prob' + 'hang-prob' + 'corrupt-prob' must be at most 1, got {total}")
    if cfg.hang_prob > 0 and not 0 < cfg.round_deadline_s < cfg.hang_s:
        raise ConfigError(f"run-config key 'hang-prob' > 0 needs 0 < round-deadline-s < hang-s (a hang must miss a "
                          f"deadline), got round-deadline-s={cfg.round_deadline_s}, hang-s={cfg.hang_s}")
    if cfg.resume and not cfg.run_name:
        raise ConfigError("run-config key 'resume' = true needs 'run-name': the run to continue")
    if cfg.engine == "async" and cfg.min_replies > cfg.num_clients:
        raise ConfigError(f"run-config key 'min-replies' = {cfg.min_replies} is more than a window's "
                          f"num-clients = {cfg.num_clients} task results: every window would fail")


def config_warnings(cfg: Config) -> list[str]:
    """Settings that run but mean something a user may not intend, said before round 1 (the ServerApp's
    log, and ``zofl run`` on stderr)."""
    from .methods import METHODS  # the method's own warnings (Method.config_warnings)

    out = METHODS[cfg.strategy].server.config_warnings(cfg)
    if cfg.dataset == "cifar10" and not cfg.standardize:
        out.append("run-config key 'standardize' = false with dataset = 'cifar10': a linear model on raw [0, 1] "
                   "pixels with the default steps diverges (the pre-trained x_0 with x0-lr = 0.1 ended at 15% test "
                   "accuracy, docs/results/README.md); set standardize = true and scale the steps to the data (the "
                   "CIFAR-10 tables use x0-lr = 0.001); the default stays false so that recorded runs keep their "
                   "meaning")
    if cfg.aggregation != "mean":
        key, per_step = METHODS[cfg.strategy].server.updates_per_step(cfg)
        if per_step < 3:
            out.append(f"run-config key 'aggregation' = {cfg.aggregation!r} combines {per_step} client update(s) per "
                       f"server step ({key}); a robust rule over fewer than 3 is their mean and outvotes nobody: "
                       f"raise {key} so that at least 2f + 1 updates meet (f hostile clients)")
    return out


def parse_config(run_config: Mapping[str, Any]) -> Config:
    """Validate ``run_config`` (missing keys take their defaults); raise ConfigError on the first bad key."""
    unknown = sorted(set(run_config) - set(KEY_BY_NAME))
    if unknown:
        import difflib

        hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
                 for k in unknown for close in [difflib.get_close_matches(k, KEY_BY_NAME, n=1)]]
        raise ConfigError(f"unknown run-config key(s) {', '.join(hints)}; every key is listed by `zofl keys` "
                          f"(docs/keys.md) and in zofl/config.py")
    cfg = Config(defaults())
    for name, value in run_config.items():
        key = KEY_BY_NAME[name]
        value = _coerce(key, value)
        if not key.check(value):
            raise ConfigError(f"run-config key {name!r} must be {key.allowed}, got {_show(value)}")
        cfg[name] = value
    _cross_checks(cfg)
    from .methods import check_method_config  # which methods exist is the registry's (zofl.methods)

    check_method_config(cfg)
    return cfg
