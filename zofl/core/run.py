"""``Run``: what every run shares, synchronous or asynchronous, whatever the engine.

The state and its start (x_0, or the checkpoint a resume continues from, checked by ``resume_point``
before any work), the records (``zofl.core.record``) and checkpoints, the failure policy's count
and its stop (``fail``), the summary (``finish``), the SuperNodes that hold the partitions
(``set_federation``), the data fingerprint on every client's work (``stamp``), the late replies'
classes, the clients' simulated devices (speeds, straggler factors, leave) and where this process's
start-up went (``startup``: ``zofl.core.startup``). ``SyncRun`` (``zofl.core.rounds``) adds rounds,
``AsyncRun`` (``zofl.core.asynchronous``) the event loop; neither inherits the other.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ..faults import delay_factor, speed_factor, task_delays
from ..results import RunFolderError
from ..settings import ConfigError
from .checkpoint import (
    CHECKPOINT,
    check_async_extra,
    check_state,
    check_sync_extra,
    load_checkpoint,
    save_checkpoint,
)
from .evaluation import EvalAnswer, fed_eval_due, server_eval_due, weighted_metrics
from .method import Method, State
from .policy import LATE_KINDS, RunFailed, allowed_failures, failure_message, late_kind
from .protocol import Failure, Reply, Work
from .record import RoundRecord, make_record
from .sampling import parse_leave
from .startup import Startup
from .summary import add_pending, fmt, outlier_fields, summarize, summary_lines

log = logging.getLogger("zofl")


def progress_unit(rounds: int, records: int, record_unit: str, unit: str = "rounds") -> str:
    """How a run's length reads in its summary (and in ``zofl run``'s progress): num-rounds ``rounds`` records
    of ``unit`` (a round, or an asynchronous update), or, when a round takes several records, that many rounds
    and the records (FedNest's and FedRZO_bl's communication rounds; every asynchronous method records its
    num-rounds updates today)."""
    return f"{rounds} {unit}" if records == rounds else f"{rounds} rounds ({records} {record_unit})"


def resume_point(writer, method: Method, total: int):
    """What a resume of ``writer.dir`` continues from: the checked checkpoint (round, wall_s, state,
    extras), or None for a fresh start (no records yet, or a run stopped before its first checkpoint
    was due: said in the log). Refuses (``RunFolderError``, naming the file) records without the
    checkpoint they should have, a checkpoint that is not this run's state (names, dtypes, shapes,
    finite values of a sane magnitude: ``check_state``) or engine's extras (``check_extra``), one
    ahead of the records, and a resume with nothing left to run. The round is 0 <= k < total (a
    negative one is refused by ``load_checkpoint``). Nothing is written before every check passed."""
    path = writer.dir / CHECKPOINT
    ck = load_checkpoint(writer.dir)
    last = writer.records[-1]["round"] if writer.records else None
    if ck is None:
        if last is None:
            return None
        every = int(writer.stored_config.get("checkpoint-every", 0))
        if 0 < every and last <= every:  # stopped before its first checkpoint was due (or written): nothing lost
            log.warning("resume: %s stopped at round %d, before its first checkpoint (round %d): it starts again "
                        "from round 0", writer.dir, last, every)
            return None
        raise RunFolderError(f"cannot resume {writer.dir}: rounds.jsonl holds rounds 0-{last} but there is no "
                             f"{CHECKPOINT} (run-config key 'checkpoint-every' = 0, or the run stopped before its "
                             f"first checkpoint); delete the folder or choose another run-name to start again")
    k = ck[0]
    if last is None or k > last:
        raise RunFolderError(f"cannot resume {writer.dir}: {path} holds round {k} but rounds.jsonl ends at "
                             f"{'no round' if last is None else f'round {last}'}; restore the records, or delete "
                             f"the folder (or choose another run-name) to start again")
    if k >= total:
        raise RunFolderError(f"run-config key 'num-rounds': nothing to resume in {writer.dir}: it has run {k} of "
                             f"{total} rounds; raise num-rounds to continue it")
    fresh = method.init()
    check_state(path, ck[2], method.state_dict(fresh))
    check_extra(path, ck[3], method, fresh, k)
    return ck


def check_extra(path, extra: dict[str, np.ndarray], method: Method, fresh: State, k: int) -> None:
    """The engine's arrays in the checkpoint: the asynchronous queue, or the synchronous simulated clock."""
    if method.cfg.engine == "async":
        check_async_extra(path, extra, method, fresh, k)
    else:
        check_sync_extra(path, extra)


class Run:
    """What a synchronous and an asynchronous run share (see the module docstring)."""

    def __init__(self, cfg, method: Method, writer):
        self.cfg, self.method, self.writer = cfg, method, writer
        self.t_start = time.perf_counter()
        self.offset, self.t_before = 0, 0.0  # rounds and wall time before this process (resume)
        self.state: State | None = None
        self.resumed_extra: dict[str, np.ndarray] = {}  # the asynchronous engine's queue, on resume
        self.total = method.communication_rounds()
        self.leave = parse_leave(cfg.leave)  # client:start:length stretches away (communication rounds)
        self.speeds = [speed_factor(cfg.seed, pid, cfg.speed_profile, cfg.speed_param, cfg.slow_clients)
                       for pid in range(cfg.num_clients)]
        # straggler-factor F for the clients of slow-clients, 1 for the others (``sim_delays``)
        self.delay_factors = [delay_factor(pid, cfg.slow_clients, cfg.straggler_factor)
                              for pid in range(cfg.num_clients)]
        self.unheld: set[int] = set()  # partitions no SuperNode holds (``set_federation``)
        self.fed = None  # zofl.strategies.nodes.Federation (None: no SuperNodes, e.g. a direct test)
        self.late_seen = dict.fromkeys(LATE_KINDS, 0)  # late replies classified since the last record
        self.metric_keys: tuple[str, ...] | None = None  # the fields of Method.metrics (``server_metrics``)
        # this process's start-up (``zofl.core.startup``): from server_app.make_run, else only what is seen from here
        self.startup: Startup = getattr(writer, "startup", None) or Startup()
        ck = writer.resume_from  # checked by ``resume_point`` in make_run, before any work
        x0_state = None
        if ck is None:
            x0_state = method.init()
            if not np.all(np.isfinite(x0_state["x"])):
                raise ConfigError(f"x_0 is not finite (x0 = {cfg.x0!r}, x0-lr = {cfg.x0_lr}): lower run-config key "
                                  f"'x0-lr', set x0 = 'zeros', or check the data for NaN or Inf; nothing was run")
        writer.accept()  # the run (or its resume) is accepted: config.json, then records
        if ck is not None:
            self.offset, self.t_before, arrays, self.resumed_extra = ck
            self.state = method.load_state_dict(arrays)
            writer.truncate(self.offset)  # rounds after the checkpoint are run (and written) again
            log.info("resume: continuing %s after round %d", writer.dir, self.offset)
        else:
            writer.truncate(-1)
        # the failure policy (zofl.core.policy); failed rounds already recorded count on resume
        self.failed_rounds = sum(bool(r.get("round_failed")) for r in writer.records)
        self.allowed_failed = allowed_failures(self.total, cfg.max_failed_rounds)
        if ck is None:
            self.state = x0_state
            self._write_record(0, {})
        self.startup.ready()  # x_0 (or the checkpoint) is in place: the first round's clock starts

    def set_federation(self, fed) -> None:
        """What ``zofl.strategies.nodes`` decided (before round 1, and again when a SuperNode joins):
        work goes only to held partitions; the summary reports refused and rejoined SuperNodes."""
        self.fed, self.unheld = fed, set(fed.unheld)
        if self.startup.node_map_s is None:
            self.startup.node_map_s = getattr(fed, "learned_s", None)
            self.startup.first_answer_s = getattr(fed, "first_answer_s", None)

    def evaluates(self, k: int) -> bool:
        """Whether round (update) ``k`` ends with a federated evaluation (run-config federated-eval, eval-every)."""
        return self.cfg.federated_eval and fed_eval_due(k, self.cfg.eval_every, self.total)

    @staticmethod
    def fed_fields(k: int, answers: list[EvalAnswer], refused: int) -> dict[str, Any]:
        """The record's federated evaluation fields of round (update) ``k`` (``weighted_metrics``), logged."""
        fed = weighted_metrics(answers, refused)
        log.info("round %d: federated evaluation by %d clients (%d examples): loss %s, accuracy %s", k,
                 fed["fed_clients"], fed["fed_examples"], fmt(fed["fed_loss"]), fmt(fed["fed_acc"]))
        return fed

    def stamp(self, work: Work) -> Work:
        """The run's data fingerprint on a client's work: the client checks it against its own data."""
        data = getattr(self.writer, "data", None)
        if data:
            work.config["data-fp"] = data["fingerprint"]  # zofl.setup.DATA_FP
        return work

    def note_late(self, results: list[Reply | Failure], simulated: bool = False) -> None:
        """Replies (or error replies) that came after their round's deadline, already counted as late
        and never used: classified (``policy.late_kind``) into the next record's ``late_queued``,
        ``late_slow`` and ``late_failed``."""
        for res in results:
            kind = late_kind(res, self.cfg.round_deadline_s, simulated)
            self.late_seen[kind] += 1
            log.info("a reply of client %s came after its deadline: %s", res.pid, kind)

    def late_fields(self) -> dict[str, int]:
        out = {f"late_{k}": n for k, n in self.late_seen.items()}
        self.late_seen = dict.fromkeys(LATE_KINDS, 0)
        return out

    @property
    def x(self) -> np.ndarray:
        return self.state["x"]

    def server_metrics(self, k: int) -> dict[str, Any]:
        """The server's evaluation of the model after round (update) ``k``: its test pass (``Method.metrics``)."""
        metrics = self.method.metrics(self.state)
        self.metric_keys = tuple(metrics)
        log.info("round %d: test acc %s, test loss %s", k, fmt(metrics["test_acc"]), fmt(metrics["test_loss"]))
        return metrics

    def skipped_metrics(self) -> dict[str, Any]:
        """A record's evaluation fields where the server does not evaluate (eval-every): NaN (null in the record),
        named as the last evaluation named them (after a resume: by one test pass, recorded nowhere)."""
        if self.metric_keys is None:
            self.metric_keys = tuple(self.method.metrics(self.state))
        return dict.fromkeys(self.metric_keys, float("nan"))

    def _write_record(self, k: int, info: dict[str, Any]) -> RoundRecord:
        """Record round (update) ``k``: the server's evaluation where due (``server_eval_due``: x_0, every eval-every
        rounds, the last; elsewhere null and ``eval_skipped``), then the checkpoint, the policy's stop, the summary."""
        if server_eval_due(k, self.cfg.eval_every, self.total):
            record = make_record(k, self.server_metrics(k), info)
        else:
            record = make_record(k, self.skipped_metrics(), {**info, "eval_skipped": True})
        every = self.cfg.checkpoint_every
        last = k == self.total
        checkpoint = bool(every) and k > 0 and (k % every == 0 or last)
        self.writer.write_round(record, sync=checkpoint or last)  # on the disk before the checkpoint that needs it
        self.startup.recorded(k)
        if checkpoint:
            save_checkpoint(self.writer.dir, k, self.wall_s(), self.method.state_dict(self.state),
                            self.checkpoint_extra())
        self.stop_if_policy_failed()
        if last:
            self.finish()
        return record

    def stop_if_policy_failed(self) -> None:
        """The failure policy's stop: the run fails once more rounds (windows) failed than max-failed-rounds allows."""
        if self.failed_rounds > self.allowed_failed:
            self.fail(self.policy_failure())

    def policy_failure(self) -> str:
        """Why the failure policy stops the run (more failed rounds than max-failed-rounds allows)."""
        return failure_message(self.failed_rounds, self.total, self.cfg.min_replies, self.cfg.max_failed_rounds)

    def sim_delays(self, n: int, pid: int) -> tuple[float, float, float]:
        """(download s, upload s, compute multiplier) of client ``pid`` in task or round ``n`` on the
        simulated clock: ``zofl.faults.task_delays`` with ``comm-s`` and its straggler factor."""
        return task_delays(self.cfg.seed, n, pid, self.cfg.comm_s, self.delay_factors[pid])

    def wall_s(self) -> float:
        return self.t_before + time.perf_counter() - self.t_start

    def setting(self) -> str:
        raise NotImplementedError  # the summary's one-line description of the run

    def checkpoint_extra(self) -> dict[str, np.ndarray]:
        raise NotImplementedError  # the engine's arrays in a checkpoint (the clock, the queue)

    def finish(self, status: str = "ok", failure: str | None = None) -> dict[str, Any]:
        """summary.json and the printed summary; ``status`` "failed" (with the reason) when the failure
        policy stopped the run (``fail``)."""
        cfg, spec = self.cfg, self.method.spec
        recs = self.writer.records
        summary = summarize(recs, strategy=self.method.name, dataset=spec.name, rounds=cfg.num_rounds,
                            engine=cfg.engine, **({"server_test": False} if cfg.server_data == "none" else {}))
        if cfg.server_data == "none":  # no server test set: no accuracy of its own to be best at
            summary["best_test_acc"] = None
        add_pending(summary, self.pending_failures())
        summary.update(status=status, failure=failure, failed_rounds=self.failed_rounds,
                       unheld_partitions=sorted(self.unheld),
                       refused_nodes=[{"node": n, "claims": p, "held_by": h,
                                       **({"reason": self.fed.data_errors[n]} if n in self.fed.data_errors else {})}
                                      for n, p, h in (self.fed.refused if self.fed else [])],
                       rejoined_nodes=[{"node": n, "partition": p, "replaced": h} for n, p, h in
                                       (self.fed.rejoined if self.fed else [])],
                       **({"reported_sizes": {str(p): n for p, n in sorted(self.fed.sizes.items())},
                           "n_train": self.method.n_train} if self.fed and self.fed.sizes else {}),
                       total_wall_s=self.wall_s(), startup=self.startup.fields(),
                       results_dir=None if self.writer.dir is None else str(self.writer.dir),  # None: in memory
                       **outlier_fields(recs, cfg, self.method.clips_coefficients), **self.method.summary_extra(recs))
        self.writer.write_summary(summary)
        lines = summary_lines(self.method.title, summary, self.setting())
        print("\n".join(lines), flush=True)
        log.info("\n".join(lines))
        return summary

    def pending_failures(self) -> list[Failure]:
        """Failures counted since the last record (none here: a round's are in its record; the
        asynchronous engine's wait for the next update)."""
        return []

    def fail(self, reason: str) -> None:
        """Stop the run as failed: what was recorded stays (records, checkpoint), summary.json says why."""
        log.error("%s", reason)
        self.finish(status="failed", failure=reason)
        raise RunFailed(reason)
