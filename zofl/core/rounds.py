"""``SyncRun``: a synchronous run as a sequence of rounds, shared by every synchronous engine.

    run = SyncRun(cfg, method, writer)            # x_0 (round 0 record) or the resumed state
    for r in run.pending_rounds():
        plan = run.plan(r)                         # S_r, stragglers, each sampled client's Work
        ... an engine delivers plan.works and collects Replies / Failures ...
        run.complete(plan, replies, failures)      # checks, update, record, checkpoint, summary

Engines differ only in how work reaches clients (Flower's Message API, its legacy API, or a
process pool); this object does everything else, so every engine gives the same numbers.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..algorithms.outliers import far_replies
from ..config import ConfigError
from ..faults import speed_factor, straggler_ids, task_delays
from ..results import RunFolderError
from .checkpoint import CHECKPOINT, check_state, check_sync_extra, load_checkpoint, save_checkpoint
from .checks import finite_or_kept, reply_problem
from .method import Method, State
from .policy import LATE_KINDS, RunFailed, allowed_failures, failure_message, late_kind, round_failed
from .protocol import Failure, Reply, Work
from .record import RoundRecord, failure_fields, make_record, reply_fields
from .sampling import parse_leave, round_available, sample_round
from .summary import add_pending, fmt, outlier_fields, summarize, summary_lines

log = logging.getLogger("zofl")


@dataclass
class RoundPlan:
    r: int  # the papers' 0-based round index
    sampled: list[int]  # S_r
    stragglers: list[int]
    works: list[Work]
    H: int = 0
    t0: float = field(default_factory=time.perf_counter)
    downlink_bytes: int | None = None  # None: the works' arrays
    unreachable: list[int] = field(default_factory=list)  # sampled, but no SuperNode holds the partition


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
        from .asynchronous import check_async_extra  # that module imports this one

        check_async_extra(path, extra, method, fresh, k)
    else:
        check_sync_extra(path, extra)


class SyncRun:
    """One run of a synchronous method: state, resume, records (see the module docstring)."""

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
        self.delay_factors = [cfg.straggler_factor if pid in straggler_ids(cfg.slow_clients) else 1.0
                              for pid in range(cfg.num_clients)]
        self.sim_clock = 0.0  # simulated device time (see ``round_sim_s``)
        self.unheld: set[int] = set()  # partitions no SuperNode holds (``set_federation``)
        self.fed = None  # zofl.strategies.nodes.Federation (None: no SuperNodes, e.g. a direct test)
        self.late_seen = dict.fromkeys(LATE_KINDS, 0)  # late replies classified since the last record
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
            self.sim_clock = float(self.resumed_extra.get("sim_clock", 0.0))
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

    def set_federation(self, fed) -> None:
        """What ``zofl.strategies.nodes`` decided (before round 1, and again when a SuperNode joins):
        work goes only to held partitions; the summary reports refused and rejoined SuperNodes."""
        self.fed, self.unheld = fed, set(fed.unheld)

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

    def round_of(self, server_round: int) -> int:
        """The papers' 0-based round index r of Flower's 1-based ``server_round`` (after a resume, counted on
        from the checkpoint's round)."""
        return self.offset + server_round - 1

    def pending_rounds(self) -> range:
        return range(self.offset, self.total)

    def plan(self, r: int) -> RoundPlan:
        cfg = self.cfg
        t0 = time.perf_counter()
        sampled, stragglers = ([], []) if self.method.server_only else \
            sample_round(cfg.seed, r, cfg.num_clients, cfg.beta, cfg.straggler_prob)
        # anarchic clients (ours, issue 31): of S_r, only those available in round r (``availability`` p_i,
        # the asynchronous engine's draw with the round for the task number) and not on ``leave`` are
        # contacted; the others get no work and count as no failure. availability "1", no leave: all of S_r.
        there = round_available(cfg.seed, r, sampled, cfg.availability, self.leave)
        if len(there) < len(sampled):
            sampled, stragglers = there, [p for p in stragglers if p in there]
        works = [self.stamp(w) for w in self.method.plan(self.state, r, sampled, stragglers)]
        unreachable = [w.pid for w in works if w.pid in self.unheld]
        works = [w for w in works if w.pid not in self.unheld]
        return RoundPlan(r, sampled, stragglers, works, self.method.round_H(self.state, r), t0,
                         unreachable=unreachable)

    def check(self, plan: RoundPlan, replies: list[Reply],
              failures: list[Failure]) -> tuple[list[Reply], list[Failure]]:
        """The usable replies (one per sampled client, checked, sorted by client id) and all failures."""
        shapes = self.method.reply_shapes(self.state, plan.r)
        good: dict[int, Reply] = {}
        failures = list(failures) + [Failure(p, f"no connected SuperNode holds partition {p}", "lost")
                                     for p in plan.unreachable]
        k = plan.r + 1
        for rep in replies:
            if rep.pid not in plan.sampled or rep.pid in good:
                log.warning("round %d: ignored a reply from client %d (not sampled, or a second reply)", k, rep.pid)
                continue
            problem = reply_problem(rep.arrays, shapes, self.cfg.reply_max_abs)
            if problem:
                log.warning("round %d: dropped client %d: %s", k, rep.pid, problem)
                failures.append(Failure(rep.pid, problem, "rejected"))
                continue
            good[rep.pid] = rep
        for f in failures:  # a failure of no sampled client (an unknown node) names nobody
            if f.pid is not None and f.pid not in plan.sampled:
                f.pid = None
        # a sampled client with neither reply nor failure missed the deadline (the Message API returns
        # nothing for it; the legacy API raises an error without saying which client it was)
        accounted = {rep.pid for rep in replies} | {f.pid for f in failures if f.pid is not None}
        missing = [p for p in plan.sampled if p not in accounted]
        anonymous = [f for f in failures if f.pid is None]
        if len(anonymous) == len(missing):  # the legacy API's errors name no client; these are the ones
            for f, p in zip(anonymous, missing):  # (which error was whose is unknown; who failed is exact)
                f.pid = p
        failures += [Failure(p, "no reply before the round deadline", "late") for p in missing[len(anonymous):]]
        for f in failures:
            if not f.rejected:
                log.warning("round %d: client %s failed or missed the deadline: %s", k, f.pid, f.reason)
        if not good and plan.sampled:
            log.warning("round %d: no usable client reply (%d sampled, %d failed)", k, len(plan.sampled),
                        len(failures))
        return [good[p] for p in sorted(good)], failures

    def complete(self, plan: RoundPlan, replies: list[Reply], failures: list[Failure],
                 aggregate=None) -> dict[str, Any]:
        """Apply round ``plan.r``: check the replies, update the state, write the record.

        ``aggregate(state, r, used_replies) -> (state, fields)`` replaces the method's ``update``
        (the cross-check with Flower's own FedAvg aggregation)."""
        used, failures = self.check(plan, replies, failures)
        sent = {w.pid: w.H for w in plan.works}
        for rep in used:  # the update sees what each client was asked (a straggler: H = 0), not a new draw
            rep.H = sent.get(rep.pid)
        outliers = self.outliers(plan, used)  # before the update: the replies as the clients sent them
        failed = not self.method.server_only and round_failed(len(used), self.cfg.min_replies)
        if failed:
            self.failed_rounds += 1
            log.warning("round %d failed: %d usable replies, fewer than min-replies = %d (%d failed round(s) of "
                        "%d allowed)", plan.r + 1, len(used), self.cfg.min_replies, self.failed_rounds,
                        self.allowed_failed)
        state, fields = (aggregate or self.method.update)(self.state, plan.r, used)
        self.state, fields = finite_or_kept(state, fields, self.state, f"round {plan.r + 1}")
        self.sim_clock += self.round_sim_s(used, plan.r)
        info = {
            "sampled": plan.sampled, "stragglers": len(plan.stragglers), "participants": len(used),
            **failure_fields(failures, self.late_fields()), "dropped": len(plan.sampled) - len(used),
            "round_failed": failed, "uplink_bytes": sum(rep.nbytes() for rep in replies),
            "downlink_bytes": sum(w.nbytes() for w in plan.works) if plan.downlink_bytes is None
            else plan.downlink_bytes,
            "wall_s": time.perf_counter() - plan.t0, **reply_fields(used), "H": plan.H,
            "clock_s": self.sim_clock, "outliers": outliers, **fields,
        }
        return self._write_record(plan.r + 1, info)

    @staticmethod
    def outliers(plan: RoundPlan, used: list[Reply]) -> list[int]:
        """The clients whose used reply lay far outside the round's spread (``zofl.algorithms.outliers``; a
        diagnostic for the summary, which changes nothing), a model read as its update from what was sent."""
        sent = {w.pid: w.arrays for w in plan.works}
        return [used[i].pid for i in far_replies([rep.arrays for rep in used], [sent.get(rep.pid) for rep in used])]

    def _write_record(self, k: int, info: dict[str, Any]) -> RoundRecord:
        metrics = self.method.metrics(self.state)
        record = make_record(k, metrics, info)
        self.writer.write_round(record)
        log.info("round %d: test acc %s, test loss %s", k, fmt(metrics["test_acc"]), fmt(metrics["test_loss"]))
        every = self.cfg.checkpoint_every
        last = k == self.total
        if every and k > 0 and (k % every == 0 or last):
            save_checkpoint(self.writer.dir, k, self.wall_s(), self.method.state_dict(self.state),
                            self.checkpoint_extra())
        if self.failed_rounds > self.allowed_failed:
            self.fail(failure_message(self.failed_rounds, self.total, self.cfg.min_replies,
                                      self.cfg.max_failed_rounds))
        if last:
            self.finish()
        return record

    def sim_delays(self, n: int, pid: int) -> tuple[float, float, float]:
        """(download s, upload s, compute multiplier) of client ``pid`` in task or round ``n`` on the
        simulated clock: ``zofl.faults.task_delays`` with ``comm-s`` and its straggler factor."""
        return task_delays(self.cfg.seed, n, pid, self.cfg.comm_s, self.delay_factors[pid])

    def round_sim_s(self, used: list[Reply], r: int = 0) -> float:
        """Simulated duration of synchronous round ``r``: its slowest participant's download + local steps
        x ``sim-step-s`` / s_i (x a straggler's multiplier) + upload, plus ``latency-s``, at most
        ``round-deadline-s`` (the device and network model of the asynchronous engine's simulated clock,
        drawn from (seed, r, client), so that both can be compared on one clock). Every communication
        round is charged: FedNest's outer round is inner-rounds + neumann-steps + 1 of them."""
        cfg = self.cfg

        def client_s(rep: Reply) -> float:
            down, up, mult = self.sim_delays(r, rep.pid)
            return int(rep.metrics.get("steps", 0)) * cfg.sim_step_s / self.speeds[rep.pid] * mult + down + up

        longest = max((client_s(rep) for rep in used), default=0.0) + cfg.latency_s
        return min(longest, cfg.round_deadline_s) if cfg.round_deadline_s else longest

    def checkpoint_extra(self) -> dict[str, np.ndarray]:
        """More to checkpoint besides the method's state: the simulated clock (and the asynchronous queue)."""
        return {"sim_clock": np.array(self.sim_clock)}

    def setting(self) -> str:
        cfg = self.cfg
        return f"{cfg.num_rounds} rounds, m={cfg.num_clients}, alpha={self.method.spec.alpha}, beta={cfg.beta}"

    def wall_s(self) -> float:
        return self.t_before + time.perf_counter() - self.t_start

    def finish(self, status: str = "ok", failure: str | None = None) -> dict[str, Any]:
        """summary.json and the printed summary; ``status`` "failed" (with the reason) when the failure
        policy stopped the run (``fail``)."""
        cfg, spec = self.cfg, self.method.spec
        recs = self.writer.records
        summary = summarize(recs, strategy=self.method.name, dataset=spec.dataset, rounds=cfg.num_rounds,
                            engine=cfg.engine)
        add_pending(summary, self.pending_failures())
        summary.update(status=status, failure=failure, failed_rounds=self.failed_rounds,
                       unheld_partitions=sorted(self.unheld),
                       refused_nodes=[{"node": n, "claims": p, "held_by": h} for n, p, h in
                                      (self.fed.refused if self.fed else [])],
                       rejoined_nodes=[{"node": n, "partition": p, "replaced": h} for n, p, h in
                                       (self.fed.rejoined if self.fed else [])],
                       total_wall_s=self.wall_s(), results_dir=str(self.writer.dir),
                       **outlier_fields(recs, cfg, self.method.name), **self.method.summary_extra(recs))
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

