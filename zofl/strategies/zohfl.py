"""ZO-HFL on Flower: a thin adapter over ``zofl.algorithms.zohfl``.

Server (``ZOHFL``, a ``flwr.server.strategy.Strategy``) -- Algorithm 1:
  configure_fit  sample S_r (beta * m clients, from the run seed), mark stragglers (H = 0),
                 send x_r with the round number, H_{i,r} and S_r; directions v_{i,r} are not
                 sent: both sides derive them from (seed, round, client id).
  aggregate_fit  f2(x_r +- eta v, y+-) per client (from the uploaded y's, or the uploaded
                 scalars), the two-point estimate, grad f1 on a server minibatch, the step.
  evaluate       test accuracy/loss and f1 of x_{r+1}; writes the round record.
Client (``client_fit``) -- Algorithm 2 twice per direction, via ``client_solve``.

Choices the paper leaves open (run-config keys, see zofl.config): y_0 = the query point;
weighting of the client estimates (``weighting``); common random numbers (``crn``);
``directions`` per client; x_0 (``x0``); uplink of vectors or scalars (``uplink``).
A client not in S_r is not contacted after round 1; it counts as H = 0, adding 0.
In round 1 the server does not yet know which SuperNode holds which partition, so it
sends to all; a client outside S_r answers at once with no work.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from ..algorithms.lower_level import local_steps, minibatch_indices
from ..algorithms.smoothing import seed_sequence
from ..algorithms.zohfl import (
    STREAM_BATCHES,
    STREAM_SAMPLING,
    STREAM_SERVER_BATCH,
    SolveSpec,
    client_directions,
    client_solve,
    client_weights,
    f2_values_from_vectors,
    server_step_size,
    server_update,
    zo_estimate,
)
from ..config import Config
from ..results import ResultsWriter
from ..tasks import DataSpec, Task, evaluate

log = logging.getLogger("zofl")


def _ids(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


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


def _well_formed(arrays: list[np.ndarray], uplink: str, k: int, n: int) -> bool:
    """A reply the server can use: the expected shapes, all finite."""
    shapes = [(k, n), (k, n)] if uplink == "vectors" else [(2, k)]
    return [a.shape for a in arrays] == shapes and all(np.isfinite(a).all() for a in arrays)


def solve_spec(cfg: Config) -> SolveSpec:
    return SolveSpec(eta=cfg.eta, lam=cfg["lambda"], mu=cfg.mu, lr0=cfg.client_lr, batch_size=cfg.batch_size,
                     radius=cfg.ball_radius, crn=cfg.crn)


def _nbytes(parameters: Parameters) -> int:
    return sum(len(t) for t in parameters.tensors)


class ZOHFL(Strategy):
    """Algorithm 1 of the ZO-HFL paper as a Flower strategy (server side)."""

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

    # -- Flower Strategy interface --------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters:
        x0 = np.asarray(self.task.init_params(self.num_features, self.num_classes), dtype=np.float64)
        if self.cfg.x0 == "pretrained" and len(self.server_data):
            x0 = pretrain(self.task, x0, self.server_data, self.cfg.x0_epochs, self.cfg.x0_lr,
                          self.cfg.batch_size, self.cfg.seed)
        return ndarrays_to_parameters([x0])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        t0 = time.perf_counter()
        if server_round == 1 and not client_manager.wait_for(self.m, timeout=int(self.cfg.client_wait_s)):
            raise RuntimeError(
                f"run-config num-clients={self.m} but only {client_manager.num_available()} SuperNodes connected "
                f"after {self.cfg.client_wait_s:.0f}s (client-wait-s): start the simulation with "
                f"--federation-config 'num-supernodes={self.m}', or set num-clients to the number of SuperNodes")
        r = server_round - 1  # the paper's 0-based round index
        self.x = parameters_to_ndarrays(parameters)[0]
        sampled, stragglers = sample_round(self.cfg.seed, r, self.m, self.cfg.beta, self.cfg.straggler_prob)
        H = local_steps(r, self.cfg.tau, self.cfg.local_steps)
        config: dict[str, Scalar] = {"round": r, "H": H, "sampled": ",".join(map(str, sampled)),
                                     "stragglers": ",".join(map(str, stragglers))}
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
        info, cfg = self.round_info, self.cfg
        r, x, n = info["r"], self.x, self.x.size
        f_values, dirs, num_examples, computes, steps = {}, {}, {}, [], 0
        uplink, dropped = 0, 0
        for proxy, res in results:
            uplink += _nbytes(res.parameters)
            pid = int(res.metrics["pid"])
            self.cid_to_pid[proxy.cid] = pid
            if not res.metrics.get("sampled") or pid not in info["sampled"]:
                continue
            arrays = parameters_to_ndarrays(res.parameters)
            if not _well_formed(arrays, cfg.uplink, cfg.directions, n):
                log.warning("round %d: dropped client %d: malformed or non-finite reply", server_round, pid)
                dropped += 1
                continue
            v = client_directions(cfg.seed, r, pid, cfg.directions, n)
            if cfg.uplink == "vectors":
                f_values[pid] = f2_values_from_vectors(x, v, arrays[0], arrays[1], cfg.eta, cfg["lambda"])
            else:
                f_values[pid] = (arrays[0][0], arrays[0][1])
            dirs[pid] = v
            num_examples[pid] = res.num_examples
            computes.append(float(res.metrics["compute_s"]))
            steps += int(res.metrics["steps"])
        pids = sorted(f_values)
        weights = client_weights(cfg.weighting, pids, self.m, num_examples, self.n_train)
        g_f2 = zo_estimate(weights, f_values, dirs, cfg.eta, n)
        grad_f1 = np.zeros(n)
        if len(self.server_data):
            idx = minibatch_indices(seed_sequence(cfg.seed, r, STREAM_SERVER_BATCH), len(self.server_data), 1,
                                    cfg.server_batch_size)[0]
            grad_f1 = self.task.grad(x, self.server_data.x[idx], self.server_data.y[idx])
        gamma_r = server_step_size(cfg.gamma, r)
        x_new = server_update(x, grad_f1, g_f2, gamma_r)
        f2_est = float(np.mean([(f_values[p][0].mean() + f_values[p][1].mean()) / 2 for p in pids])) \
            if pids else float("nan")
        info.update(participants=len(pids), failures=len(failures) + dropped, uplink_bytes=uplink, f2_est=f2_est,
                    client_compute_s=float(sum(computes)), client_compute_max_s=max(computes, default=0.0),
                    local_steps=steps, gamma_r=gamma_r)
        return ndarrays_to_parameters([x_new]), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []  # evaluation is centralised (``evaluate``)

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters):
        x = parameters_to_ndarrays(parameters)[0]
        test_loss, test_acc = evaluate(self.task, x, self.test_data)
        f1 = self.task.loss(x, self.server_data.x, self.server_data.y) if len(self.server_data) else 0.0
        info = self.round_info if server_round > 0 else {}
        f2_est = info.get("f2_est", float("nan"))
        record = {
            "round": server_round, "test_acc": test_acc, "test_loss": test_loss, "f1": float(f1), "f2_est": f2_est,
            "objective": float(f1) + f2_est, "sampled": info.get("sampled", []),
            "participants": info.get("participants", 0), "stragglers": len(info.get("stragglers", [])),
            "failures": info.get("failures", 0), "uplink_bytes": info.get("uplink_bytes", 0),
            "downlink_bytes": info.get("downlink_bytes", 0),
            "wall_s": time.perf_counter() - info["t0"] if info else 0.0,
            "client_compute_s": info.get("client_compute_s", 0.0),
            "client_compute_max_s": info.get("client_compute_max_s", 0.0),
            "local_steps": info.get("local_steps", 0), "H": info.get("H", 0), "gamma_r": info.get("gamma_r", 0.0),
        }
        self.writer.write_round(record)
        log.info("round %d: test acc %.4f, test loss %.4f, f1 %.4f, f2 est %.4g", server_round, test_acc, test_loss,
                 f1, f2_est)
        if server_round == self.cfg.num_rounds:
            self.finish()
        return test_loss, {"test_acc": test_acc, "f1": float(f1)}

    def finish(self) -> None:
        recs = self.writer.records
        summary = {
            "strategy": "zohfl", "dataset": self.spec.dataset, "rounds": self.cfg.num_rounds,
            "final_test_acc": recs[-1]["test_acc"], "final_test_loss": recs[-1]["test_loss"],
            "initial_test_acc": recs[0]["test_acc"], "best_test_acc": max(r["test_acc"] or 0 for r in recs),
            "total_wall_s": time.perf_counter() - self.t_start,
            "total_client_compute_s": sum(r["client_compute_s"] or 0 for r in recs),
            "total_local_steps": sum(r["local_steps"] or 0 for r in recs),
            "total_uplink_bytes": sum(r["uplink_bytes"] or 0 for r in recs),
            "total_downlink_bytes": sum(r["downlink_bytes"] or 0 for r in recs),
            "results_dir": str(self.writer.dir),
        }
        self.writer.write_summary(summary)
        lines = [f"ZO-HFL on {self.spec.dataset}: {self.cfg.num_rounds} rounds, m={self.m}, "
                 f"alpha={self.spec.alpha}, beta={self.cfg.beta}",
                 f"  test accuracy {summary['initial_test_acc']:.4f} -> {summary['final_test_acc']:.4f} "
                 f"(best {summary['best_test_acc']:.4f}), test loss {summary['final_test_loss']:.4f}",
                 f"  {summary['total_local_steps']} local SGD steps, {summary['total_client_compute_s']:.1f}s client "
                 f"compute, {summary['total_wall_s']:.1f}s wall",
                 f"  results: {self.writer.dir}"]
        print("\n".join(lines), flush=True)
        log.info("\n".join(lines))


def client_fit(cfg: Config, task: Task, spec: DataSpec, pid: int, parameters: list[np.ndarray],
               config: dict[str, Scalar]) -> tuple[list[np.ndarray], int, dict[str, Scalar]]:
    """Client i's work in round r: Algorithm 2 at x_r +- eta v_j for each of its directions."""
    r = int(config["round"])
    if pid not in _ids(str(config["sampled"])):
        return [], 0, {"pid": pid, "sampled": False}
    t0 = time.perf_counter()
    data = task.client_data(spec, pid)
    x = parameters[0]
    H = 0 if pid in _ids(str(config["stragglers"])) else int(config["H"])
    v = client_directions(cfg.seed, r, pid, cfg.directions, x.size)
    grad = lambda p, idx: task.grad(p, data.x[idx], data.y[idx])  # noqa: E731
    res = client_solve(grad, len(data), x, v, H, solve_spec(cfg), (cfg.seed, r, pid, STREAM_BATCHES))
    out = [res.y_plus, res.y_minus] if cfg.uplink == "vectors" else [np.stack([res.f_plus, res.f_minus])]
    metrics = {"pid": pid, "sampled": True, "H": H, "steps": res.steps, "compute_s": time.perf_counter() - t0}
    return out, len(data), metrics
