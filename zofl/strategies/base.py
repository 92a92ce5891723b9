"""What every strategy of the App shares: sampling, messaging, evaluation and records.

``RoundStrategy`` is a ``flwr.server.strategy.Strategy`` that
* samples S_r (round(beta m) clients) and stragglers from (seed, round) (``sample_round``),
* learns which SuperNode holds which partition from the replies, so later rounds contact only S_r,
* sends x_r plus ``downlink_extra()`` arrays and a config {round, H, sampled, stragglers, ...},
* checks every reply (shapes, finiteness) before the subclass sees it, dropping and logging bad ones,
* evaluates x on the server's test set and data after every round and writes the round record.
A subclass implements ``aggregate(r, x, replies) -> (x_new, info)`` and ``reply_shapes``.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from ..algorithms.lower_level import local_steps
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import STREAM_SAMPLING
from ..config import Config
from ..results import ResultsWriter
from ..tasks import DataSpec, Task, evaluate

log = logging.getLogger("zofl")
CHECKPOINT = "checkpoint.npz"


def sample_round(seed: int, round_idx: int, m: int, beta: float, straggler_prob: float) -> tuple[list[int], list[int]]:
    """(S_r, stragglers): max(1, round(beta m)) client ids drawn without replacement, and the
    subset marked as stragglers (each with probability ``straggler_prob``). Pure; from seeds."""
    rng = np.random.default_rng(seed_sequence(seed, round_idx, STREAM_SAMPLING))
    k = max(1, int(round(beta * m)))
    sampled = sorted(int(i) for i in rng.choice(m, size=k, replace=False))
    stragglers = [i for i in sampled if rng.random() < straggler_prob]
    return sampled, stragglers


def pretrain(task: Task, x: np.ndarray, data, epochs: int, lr: float, batch_size: int, seed: int) -> np.ndarray:
    """x_0 = ``epochs`` epochs of plain SGD on the server's data (x0 = pretrained; our choice)."""
    rng = np.random.default_rng(seed_sequence(seed, 0x0))
    x = x.copy()
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            x -= lr * task.grad(x, data.x[idx], data.y[idx])
    return x


def ids_of(text: str) -> list[int]:
    return [int(t) for t in str(text).split(",") if t]


def _nbytes(parameters: Parameters) -> int:
    return sum(len(t) for t in parameters.tensors)


@dataclass
class Reply:
    """A checked client reply."""

    pid: int
    arrays: list[np.ndarray]
    num_examples: int
    metrics: dict[str, Scalar]


class RoundStrategy(Strategy):
    """Shared server side of all strategies (see the module docstring)."""

    name = "base"  # the run-config value of ``strategy``
    title = "base"  # for printed summaries

    def __init__(self, cfg: Config, task: Task, spec: DataSpec, writer: ResultsWriter):
        super().__init__()
        self.cfg, self.task, self.spec, self.writer = cfg, task, spec, writer
        self.server_data = task.server_data(spec)
        self.test_data = task.test_data(spec)
        self.n_train = task.num_train(spec)
        self.num_features = self.test_data.x.shape[1]
        self.num_classes = self.test_data.num_classes
        self.m = cfg.num_clients
        self.cid_to_pid: dict[str, int] = {}
        self.x: np.ndarray | None = None
        self.round_info: dict[str, Any] = {}
        self.t_start = time.perf_counter()
        self.offset = 0  # rounds done before this process started (resume)
        self.t_before = 0.0  # wall time of those rounds
        self.resumed_x: np.ndarray | None = None
        if cfg.resume:
            self._resume()

    # -- for subclasses -------------------------------------------------------------------
    def downlink_extra(self) -> list[np.ndarray]:
        """Arrays sent after x_r (e.g. SCAFFOLD's server control variate)."""
        return []

    def reply_shapes(self, n: int) -> list[tuple[int, ...]]:
        """The shapes of a sampled client's reply arrays."""
        raise NotImplementedError

    def aggregate(self, r: int, x: np.ndarray, replies: list[Reply]) -> tuple[np.ndarray, dict[str, Any]]:
        """x_{r+1} from x_r and the checked replies of the clients in S_r; info goes to the record."""
        raise NotImplementedError

    @classmethod
    def communication_rounds(cls, cfg: Config) -> int:
        """How many Flower rounds the run takes (``num-rounds``, unless a strategy has inner rounds)."""
        return cfg.num_rounds

    def round_plan(self, r: int) -> tuple[int, dict[str, Scalar], list[np.ndarray] | None]:
        """(H, extra config entries, arrays to send or None for x_r + ``downlink_extra()``) of round r."""
        return local_steps(r, self.cfg.tau, self.cfg.local_steps), {}, None

    def metrics(self, x: np.ndarray) -> dict[str, Any]:
        """Test accuracy and loss of x, and f1 (the loss on the server's data), for the round record."""
        test_loss, test_acc = evaluate(self.task, x, self.test_data)
        f1 = float(self.task.loss(x, self.server_data.x, self.server_data.y)) if len(self.server_data) else 0.0
        return {"test_acc": test_acc, "test_loss": test_loss, "f1": f1}

    def summary_extra(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The strategy's memory across rounds besides x (e.g. SCAFFOLD's c), for checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``state_dict`` returned."""

    def initial_x(self) -> np.ndarray:
        """x_0 (before any round)."""
        x0 = np.asarray(self.task.init_params(self.num_features, self.num_classes), dtype=np.float64)
        if self.cfg.x0 == "pretrained" and len(self.server_data):
            x0 = pretrain(self.task, x0, self.server_data, self.cfg.x0_epochs, self.cfg.x0_lr,
                          self.cfg.batch_size, self.cfg.seed)
        return x0

    def rounds_to_run(self) -> int:
        """Flower rounds this process runs: all of them, or those after the checkpoint it resumed from."""
        return self.communication_rounds(self.cfg) - self.offset

    # -- checkpoints ----------------------------------------------------------------------
    def _checkpoint_path(self):
        return self.writer.dir / CHECKPOINT

    def save_checkpoint(self, k: int, x: np.ndarray) -> None:
        """Round k's state, written atomically (a crash leaves the previous checkpoint intact).

        All randomness is derived from (seed, round, client) (``seed_sequence``), so the round
        number is the whole random state: there is no generator state to save."""
        arrays = {"round": np.array(k), "x": x, "wall_s": np.array(self.t_before + time.perf_counter() - self.t_start)}
        arrays.update({f"mem/{key}": v for key, v in self.state_dict().items()})
        tmp = self.writer.dir / f".{CHECKPOINT}.tmp.npz"
        np.savez(tmp, **arrays)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self._checkpoint_path())

    def _resume(self) -> None:
        path = self._checkpoint_path()
        if not path.exists():
            log.info("resume: no checkpoint in %s, starting from round 0", self.writer.dir)
            self.writer.truncate(-1)
            return
        with np.load(path) as ck:
            self.offset = int(ck["round"])
            self.resumed_x = np.array(ck["x"])
            self.t_before = float(ck["wall_s"])
            self.load_state_dict({k[4:]: np.array(ck[k]) for k in ck.files if k.startswith("mem/")})
        self.writer.truncate(self.offset)  # rounds after the checkpoint are run (and written) again
        log.info("resume: continuing %s after round %d", self.writer.dir, self.offset)

    # -- Flower Strategy interface --------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        x0 = self.resumed_x if self.resumed_x is not None else self.initial_x()
        return ndarrays_to_parameters([x0])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        t0 = time.perf_counter()
        if server_round == 1 and not client_manager.wait_for(self.m, timeout=int(self.cfg.client_wait_s)):
            raise RuntimeError(
                f"run-config num-clients={self.m} but only {client_manager.num_available()} SuperNodes connected "
                f"after {self.cfg.client_wait_s:.0f}s (client-wait-s): start the simulation with "
                f"--federation-config 'num-supernodes={self.m}', or set num-clients to the number of SuperNodes")
        r = server_round + self.offset - 1  # the papers' 0-based round index
        self.x = parameters_to_ndarrays(parameters)[0]
        sampled, stragglers = sample_round(self.cfg.seed, r, self.m, self.cfg.beta, self.cfg.straggler_prob)
        H, extra_config, arrays = self.round_plan(r)
        config: dict[str, Scalar] = {"round": r, "H": H, "sampled": ",".join(map(str, sampled)),
                                     "stragglers": ",".join(map(str, stragglers)), **extra_config}
        if arrays is None:
            extra = self.downlink_extra()
            arrays = [self.x, *extra] if extra else None
        if arrays is not None:
            parameters = ndarrays_to_parameters(arrays)
        fit_ins = FitIns(parameters, config)
        clients = client_manager.all()
        known = {self.cid_to_pid[c]: c for c in clients if c in self.cid_to_pid}
        targets = [clients[known[p]] for p in sampled if p in known]
        if any(p not in known for p in sampled):  # the mapping is learned from the replies
            targets += [proxy for cid, proxy in clients.items() if cid not in self.cid_to_pid]
        self.round_info = {"t0": t0, "r": r, "H": H, "sampled": sampled, "stragglers": stragglers,
                           "downlink_bytes": _nbytes(parameters) * len(targets)}
        return [(proxy, fit_ins) for proxy in targets]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures):
        """Check every reply, aggregate, and refuse a non-finite model.

        A reply is dropped (and logged) if it has the wrong shapes, a NaN or Inf, or any value above
        ``reply-max-abs``; Flower's failures are clients that raised or missed the round deadline."""
        info, x = self.round_info, self.x
        k = server_round + self.offset
        replies: list[Reply] = []
        uplink, rejected = 0, 0
        shapes = self.reply_shapes(x.size)
        for proxy, res in results:
            uplink += _nbytes(res.parameters)
            pid = int(res.metrics["pid"])
            self.cid_to_pid[proxy.cid] = pid
            if not res.metrics.get("sampled") or pid not in info["sampled"]:
                continue
            arrays = parameters_to_ndarrays(res.parameters)
            problem = reply_problem(arrays, shapes, self.cfg.reply_max_abs)
            if problem:
                log.warning("round %d: dropped client %d: %s", k, pid, problem)
                rejected += 1
                continue
            replies.append(Reply(pid, arrays, res.num_examples, dict(res.metrics)))
        for failure in failures:
            log.warning("round %d: a client failed or missed the deadline: %s", k, _describe(failure))
        replies.sort(key=lambda rep: rep.pid)
        if not replies:
            log.warning("round %d: no usable client reply (%d sampled, %d failed, %d rejected)", k,
                        len(info["sampled"]), len(failures), rejected)
        x_new, extra_info = self.aggregate(info["r"], x, replies)
        if not np.all(np.isfinite(x_new)):
            log.error("round %d: the aggregate is not finite; the global model stays x_r", k)
            x_new, extra_info = x.copy(), {**extra_info, "model_rejected": True}
        computes = [float(rep.metrics["compute_s"]) for rep in replies]
        info.update(participants=len(replies), failures=len(failures) + rejected, rejected=rejected,
                    dropped=len(info["sampled"]) - len(replies), uplink_bytes=uplink,
                    client_compute_s=float(sum(computes)), client_compute_max_s=max(computes, default=0.0),
                    client_wall_max_s=max((float(rep.metrics.get("wall_s", 0.0)) for rep in replies), default=0.0),
                    local_steps=sum(int(rep.metrics["steps"]) for rep in replies), **extra_info)
        return ndarrays_to_parameters([x_new]), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []  # evaluation is centralised (``evaluate``)

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters):
        if server_round == 0 and self.resumed_x is not None:
            return None  # resumed: round 0 (and every round up to the checkpoint) is already written
        k = server_round + self.offset
        x = parameters_to_ndarrays(parameters)[0]
        metrics = self.metrics(x)
        test_loss, test_acc, f1 = metrics["test_loss"], metrics["test_acc"], metrics["f1"]
        info = self.round_info if server_round > 0 else {}
        f2_est = info.get("f2_est", float("nan"))
        record = {
            **metrics, "round": k, "f2_est": f2_est,
            "objective": f1 + f2_est, "sampled": info.get("sampled", []),
            "participants": info.get("participants", 0), "stragglers": len(info.get("stragglers", [])),
            "failures": info.get("failures", 0), "dropped": info.get("dropped", 0),
            "rejected": info.get("rejected", 0), "client_wall_max_s": info.get("client_wall_max_s", 0.0),
            "uplink_bytes": info.get("uplink_bytes", 0),
            "downlink_bytes": info.get("downlink_bytes", 0),
            "wall_s": time.perf_counter() - info["t0"] if info else 0.0,
            "client_compute_s": info.get("client_compute_s", 0.0),
            "client_compute_max_s": info.get("client_compute_max_s", 0.0),
            "local_steps": info.get("local_steps", 0), "H": info.get("H", 0), "gamma_r": info.get("gamma_r", 0.0),
            **info.get("record_extra", {}),
        }
        self.writer.write_round(record)
        log.info("round %d: test acc %s, test loss %s", k, _fmt(test_acc), _fmt(test_loss))
        every = self.cfg.checkpoint_every
        last = k == self.communication_rounds(self.cfg)
        if every and k > 0 and (k % every == 0 or last):
            self.save_checkpoint(k, x)
        if last:
            self.finish()
        return test_loss, {"test_acc": test_acc, "f1": f1}

    def finish(self) -> None:
        recs = self.writer.records
        summary = {
            "strategy": self.name, "dataset": self.spec.dataset, "rounds": self.cfg.num_rounds,
            "final_test_acc": recs[-1]["test_acc"], "final_test_loss": recs[-1]["test_loss"],
            "initial_test_acc": recs[0]["test_acc"], "best_test_acc": max(r["test_acc"] or 0 for r in recs),
            "total_wall_s": self.t_before + time.perf_counter() - self.t_start,
            "total_client_compute_s": sum(r["client_compute_s"] or 0 for r in recs),
            "total_local_steps": sum(r["local_steps"] or 0 for r in recs),
            "total_uplink_bytes": sum(r["uplink_bytes"] or 0 for r in recs),
            "total_downlink_bytes": sum(r["downlink_bytes"] or 0 for r in recs),
            "results_dir": str(self.writer.dir), **self.summary_extra(),
        }
        self.writer.write_summary(summary)
        lines = [f"{self.title} on {self.spec.dataset}: {self.cfg.num_rounds} rounds, m={self.m}, "
                 f"alpha={self.spec.alpha}, beta={self.cfg.beta}",
                 f"  test accuracy {_fmt(summary['initial_test_acc'])} -> {_fmt(summary['final_test_acc'])} "
                 f"(best {_fmt(summary['best_test_acc'])}), test loss {_fmt(summary['final_test_loss'])}",
                 f"  {summary['total_local_steps']} local steps, {summary['total_client_compute_s']:.1f}s client "
                 f"compute, {summary['total_wall_s']:.1f}s wall",
                 f"  results: {self.writer.dir}"]
        print("\n".join(lines), flush=True)
        log.info("\n".join(lines))


def reply_problem(arrays: list[np.ndarray], shapes: list[tuple[int, ...]], max_abs: float) -> str | None:
    """Why a client's reply cannot be used, or None: wrong shapes, NaN/Inf, or an absurd magnitude."""
    got = [a.shape for a in arrays]
    if got != shapes:
        return f"wrong shapes {got}, expected {shapes}"
    if not all(np.isfinite(a).all() for a in arrays):
        return "NaN or Inf in the reply"
    biggest = max((float(np.abs(a).max()) for a in arrays if a.size), default=0.0)
    if biggest > max_abs:
        return f"absurd magnitude {biggest:.3g} > reply-max-abs = {max_abs:g}"
    return None


def _describe(failure) -> str:
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    _, res = failure
    return f"status {res.status.code.name}: {res.status.message}"


def _fmt(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.4f}"


def client_steps(pid: int, config: dict[str, Scalar]) -> int:
    """This client's H_{i,r}: the round's H, or 0 if the server marked it a straggler."""
    return 0 if pid in ids_of(config.get("stragglers", "")) else int(config["H"])


def not_sampled(pid: int, config: dict[str, Scalar]) -> bool:
    """True if this client is outside S_r this round (it then replies at once with no work)."""
    return "sampled" in config and pid not in ids_of(str(config["sampled"]))
